#pragma once
// When two computations that should agree mathematically do agree: the two sides of a law, or two
// orders of a fold. Each side is evaluated twice, in extended (long double) and in exact (double)
// arithmetic, on the same inputs, and the extended values are compared with a tolerance derived from the
// difference between the two arithmetics (see tolerance.cpp for the derivation).
#include <optional>
#include <vector>

#include "algebra/monoid_evaluator.h"

namespace twist::algebra {

// One side, evaluated in both arithmetics.
struct Evaluated {
  Values extended, exact;
};

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

// The tolerance for comparing the extended values of two sides of one component.
Real agreement_tolerance(Real lhs_extended, Real lhs_exact, Real rhs_extended, Real rhs_exact);

// Compares two sides component by component; `types` are the components' types (integers and bools
// compare exactly). Equal infinities make the comparison inconclusive unless `infinities_are_evidence`
// (they are where the values compared are constants such as an identity, rather than results that may
// have overflowed).
Comparison compare(const std::vector<Type>& types, const Evaluated& lhs, const Evaluated& rhs,
                   bool infinities_are_evidence = false);

}  // namespace twist::algebra
