#pragma once
// Halide expressions as Z3 terms, for the SMT level of the checker (algebra/smt_proof.h).
//
// The encoding is exact where it exists: an integer component is a bit-vector of its type's width, so +,
// -, * wrap as they do in the evaluator (lang/evaluate.h), division and remainder follow Halide (x / 0 ==
// 0, the remainder is never negative) and the shifts and bitwise operators act on the two's complement
// bits. A floating-point component is a real number: +, -, *, /, min, max, abs, select and comparisons
// are the exact operations, without rounding, without infinities and without NaN (a division by zero is
// an unspecified real, so a proof holds whatever it is). Whatever has no exact meaning here (exp, log,
// sqrt, a cast from floating point to an integer, an infinite constant) is refused with NotEncodable, and
// the laws that need it are left to the other levels.
#include <z3++.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "lang/expr.h"

namespace twist::algebra {

// What the encoding cannot express, and where.
struct NotEncodable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class SmtEncoder {
 public:
  explicit SmtEncoder(z3::context &context) : context_(context) {}

  // A fresh unknown of type t: a bit-vector, a real or a boolean.
  z3::expr unknown(const std::string &name, const Type &t);
  // The constant `value` of type t (NotEncodable for NaN and infinities of a floating-point type).
  z3::expr constant(const Type &t, double value);
  // While bound, the variable `name` of the expressions stands for `term`.
  void bind(const std::string &name, const z3::expr &term) { bound_.insert_or_assign(name, term); }

  // The term for e, over the bound variables; throws NotEncodable.
  z3::expr encode(const Halide::Expr &e);

  // The value a model gives a term of type t, as the evaluator carries it (an integer's value in its
  // type's range, a real rounded to the nearest long double).
  static long double value_of(const z3::model &model, const z3::expr &term, const Type &t);

 private:
  z3::expr cast(const Type &to, const Halide::Expr &from);
  z3::expr divide(const Halide::Expr &a, const Halide::Expr &b, bool remainder);
  z3::expr call(const Halide::Internal::Call *op, const Halide::Expr &e);
  z3::expr to_real(const z3::expr &bits, const Type &from);

  z3::context &context_;
  std::map<std::string, z3::expr> bound_;
};

}  // namespace twist::algebra
