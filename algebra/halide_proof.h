#pragma once
// Level 2 of the checker: Halide's prove_associativity, which matches an update definition against a
// table of associative patterns (+, *, min, max, argmin/argmax-like pairs, complex multiplication, ...).
#include <optional>
#include <string>

#include "lang/monoid.h"

namespace twist::algebra {

struct HalideProof {
  std::string pattern;    // the operator Halide matched, printed
  bool identity_matches;  // whether the monoid's identity is the one of Halide's pattern
};

// nullopt when Halide does not prove the combine associative (which includes every combine of more than
// two interdependent components, and anything outside its table such as softmax).
std::optional<HalideProof> prove_with_halide(const Monoid &m);

}  // namespace twist::algebra
