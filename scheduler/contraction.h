#pragma once
// Recognising a contraction: a sum whose elements are products of two inputs, x = A(...) * B(...), which a
// matrix atom can reduce a tile at a time.
#include <optional>
#include <string>
#include <vector>

#include "lang/monoid.h"

namespace twist {

struct ContractionOperand {
  std::string input;
  Type type;                         // f16 or bf16, as the atom reads it
  std::vector<Halide::Expr> coords;  // the call's arguments, in the algorithm's variables
};

struct Contraction {
  ContractionOperand a, b;  // a is indexed by the output's first dimension and k, b by k and the second
};

// The contraction in a reduction with `monoid` over `elements`, if it is one: a sum monoid with a plain lift,
// and an element that is the product of two calls of f16 or bf16 inputs (each possibly cast to the sum's
// type). Which factor is A is decided by the caller's layout; here a is the left factor.
std::optional<Contraction> as_contraction(const Monoid &monoid, const std::vector<Expr> &elements);

// Whether `monoid` is a plain sum: one component, identity 0, combine a + b, lift the element itself.
bool is_plain_sum(const Monoid &monoid);

}  // namespace twist
