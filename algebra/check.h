#pragma once
// The associativity checker. A schedule that reorders or splits a reduction is legal only if the
// reduction is a list homomorphism, h(x ++ y) = h(x) . h(y) with `.` associative; the checker decides
// whether a monoid's combine is, in levels, and reports which level decided:
//  1. proved by construction: the library's monoid; a product of proved factors; a twist over a proved
//     base (without a reference, or with one whose r-independence passes a randomized test);
//  2. proved by Halide's prove_associativity, where its pattern table applies;
//  3. tested: associativity, identity, the homomorphism law on random splits and leftward == rightward
//     fold, on random reachable states in extended precision (algebra/tolerance.h says why rounding
//     cannot make it reject an associative combine);
//  4. derived (algebra/derive.h): a combine built from a leftward fold, then checked like any other.
// A rejection carries a concrete counterexample. Verdicts are cached by the monoid's structural key.
#include <cstdint>

#include "algebra/verdict.h"

namespace twist::algebra {

struct CheckOptions {
  uint64_t seed = 20240611;
  int trials = 256;                         // instances of each law
  int max_list_length = 6;                  // of the random lists whose folds are the reachable states
  Level first_level = Level::construction;  // start at a later level to test what a proof would accept
};

Verdict check_associativity(const Monoid& m, const CheckOptions& options = {});

// Whether a verdict for m (or for a monoid of the same structure) under these options is cached, so that
// check_associativity returns it without checking again.
bool has_cached_verdict(const Monoid& m, const CheckOptions& options = {});

}  // namespace twist::algebra
