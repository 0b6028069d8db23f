#pragma once
// When two computations that should agree mathematically do agree: the two sides of a law, or two
// orders of a fold. Each side is evaluated twice, in extended (long double) and in exact (double)
// arithmetic, on the same inputs, and the extended values are compared with a tolerance derived from the
// difference between the two arithmetics (see tolerance.cpp for the derivation).
#include <cstdint>
#include <optional>
#include <vector>

#include "algebra/monoid_evaluator.h"

namespace twist::algebra {

// One side of a comparison, evaluated in both arithmetics at the instance's inputs, and at a few nearby
// inputs (see nearby() and tolerance.cpp): the same side, in both arithmetics, at each.
struct Evaluated {
  Values extended, exact;
  std::vector<Values> nearby_extended = {}, nearby_exact = {};
};

// The inputs moved by a random relative amount between 2^-40 and 2^-20 each (finite nonzero values only;
// `movable[k]` says whether component k may move: the floating-point ones). It fills their significands
// with random bits.
Values nearby(const Values &inputs, const std::vector<bool> &movable, uint64_t &seed);

enum class Agreement {
  agree,
  disagree,      // a component differs by more than its tolerance, in both arithmetics, or is NaN on one
                 // side only, in both (see compare())
  inconclusive,  // NaN on both sides or in one arithmetic only, equal infinities, or a difference that only
                 // one arithmetic shows (decided by rounding)
};

struct Comparison {
  Agreement agreement = Agreement::agree;
  // The component that decided a disagreement (the largest difference relative to its tolerance).
  int component = -1;
  Real difference = 0, tolerance = 0;
};

// The tolerance for comparing the extended values of component k of two sides.
Real agreement_tolerance(const Evaluated &lhs, const Evaluated &rhs, size_t k);

// Compares two sides component by component; `types` are the components' types (integers and bools
// compare exactly). Equal infinities make the comparison inconclusive unless `infinities_are_evidence`
// (they are where the values compared are constants such as an identity, rather than results that may
// have overflowed).
// `input_magnitude` is the largest finite magnitude among the inputs (states, elements, the identity):
// a difference below 2^-48 of it is never a disagreement (see tolerance.cpp). `nan_is_evidence`: the
// inputs are states, some infinite where the identity is (a masked softmax state) and none infinite
// elsewhere, so that a NaN on one side only, in both arithmetics, is a missing guard and a disagreement.
// (From finite inputs a NaN may be rounding near a singularity, a square root of a variance rounded
// below zero; from infinite data, as in a variance of inf, NaN is an answer, not a fault of the combine.)
Comparison compare(const std::vector<Type> &types, const Evaluated &lhs, const Evaluated &rhs,
                   bool infinities_are_evidence = false, Real input_magnitude = 0,
                   bool nan_is_evidence = false);

}  // namespace twist::algebra
