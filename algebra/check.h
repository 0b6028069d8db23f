#pragma once
// The associativity checker. A schedule that reorders or splits a reduction is legal only if the
// reduction is a list homomorphism, h(x ++ y) = h(x) . h(y) with `.` associative; the checker decides
// whether a monoid's combine is, in levels, and reports which level decided:
//  1. proved by construction: the library's monoid; a product of proved factors; a twist over a proved
//     base (without a reference, or with one whose r-independence passes a randomized test);
//  2. proved by Halide's prove_associativity, where its pattern table applies (the identity, where it is
//     not Halide's, is tested);
//  3. SMT (algebra/smt_proof.h): Z3 proves associativity and both identity laws for every state, exactly
//     (bit-vectors for integers; real numbers for floating point, which proves the exact operation that
//     the floating-point combine rounds), or finds lifts of elements that violate one, which are reported
//     only once the evaluator confirms them. A proof is reported only after level 4's testing, which
//     draws the infinities and extreme values the reals lack, finds no counterexample;
//  4. tested: associativity, identity, the homomorphism law on random splits and leftward == rightward
//     fold, on random reachable states in extended precision (algebra/tolerance.h says why rounding
//     cannot make it reject an associative combine). States are folds of lists as long as the schedule's
//     tiles, trees and splits (CheckOptions::fold_lengths) and of random lengths into the thousands; the
//     elements range over their type (tiny, huge, negative, signed zeros, infinities, ties);
//  5. derived (algebra/derive.h): a combine built from a leftward fold, then checked like any other.
// A rejection carries a concrete counterexample. Verdicts are cached by the monoid's structural key.
#include <cstdint>
#include <vector>

#include "algebra/verdict.h"

namespace twist::algebra {

struct CheckOptions {
  uint64_t seed = 20240611;
  int trials = 256;                         // instances of each law
  int max_list_length = 6;                  // of most random lists whose folds are the reachable states
  int max_long_list_length = 2048;          // of the few long ones, which reach large counts and sums
  std::vector<int> fold_lengths = {};       // the lengths the schedule folds: tile extents, split parts
  unsigned smt_timeout_ms = 2000;           // per Z3 query (level 3); a query that runs out decides nothing
  Level first_level = Level::construction;  // start at a later level to test what a proof would accept
};

Verdict check_associativity(const Monoid &m, const CheckOptions &options = {});

// Whether a . b == b . a for every pair of states, which a lowering that folds the points of a reduction out
// of their order needs besides associativity (a reorder of reduction loops, a tree that deals points to
// threads in turn). A verdict like associativity's (Verdict::property is "commutative"), by the levels
// that apply: 1. by construction (the library's commutative monoids, products of commutative factors,
// twists over a commutative base); 3. Z3 over every state, or a refutation on lifts confirmed by
// evaluation; 4. tested on pairs of reachable states. Cached like associativity's.
Verdict check_commutativity(const Monoid &m, const CheckOptions &options = {});

// Whether a verdict for m (or for a monoid of the same structure) under these options is cached, so that
// check_associativity returns it without checking again.
bool has_cached_verdict(const Monoid &m, const CheckOptions &options = {});

}  // namespace twist::algebra
