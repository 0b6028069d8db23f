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

// One side, evaluated in both arithmetics. `redrawn` holds further double evaluations on the inputs
// moved to neighbouring doubles (random directions): each re-draws the rounding errors, so that one
// double evaluation that happens to round almost exactly cannot make the tolerance too small.
struct Evaluated {
  Values extended, exact;
  std::vector<Values> redrawn = {};
};

// The inputs moved to a neighbouring double each, in random directions (finite nonzero values only;
// `perturbable[k]` says whether component k may be perturbed: floating-point ones).
Values perturbed(const Values& inputs, const std::vector<bool>& perturbable, uint64_t& seed);

enum class Agreement {
  agree,
  disagree,      // a component differs by more than its tolerance, in both arithmetics
  inconclusive,  // NaN, equal infinities, or a difference that only one arithmetic shows (decided by
                 // rounding)
};

struct Comparison {
  Agreement agreement = Agreement::agree;
  // The component that decided a disagreement (the largest difference relative to its tolerance).
  int component = -1;
  Real difference = 0, tolerance = 0;
};

// The tolerance for comparing the extended values of two sides of one component, from the double
// evaluations of each side (the exact one and any re-drawn ones, in the same order on both sides).
Real agreement_tolerance(Real lhs_extended, const std::vector<Real>& lhs_doubles, Real rhs_extended,
                         const std::vector<Real>& rhs_doubles);

// Compares two sides component by component; `types` are the components' types (integers and bools
// compare exactly). Equal infinities make the comparison inconclusive unless `infinities_are_evidence`
// (they are where the values compared are constants such as an identity, rather than results that may
// have overflowed).
Comparison compare(const std::vector<Type>& types, const Evaluated& lhs, const Evaluated& rhs,
                   bool infinities_are_evidence = false);

}  // namespace twist::algebra
