#include "algebra/tolerance.h"

#include <cmath>

#include "lang/error.h"

namespace twist::algebra {

// Why this tolerance, and why rounding cannot reach it while a real counterexample exceeds it.
//
// Let L and R be the real-number values of the two sides, L_e and R_e their extended evaluations (unit
// roundoff u_e = 2^-64) and L_d and R_d their double evaluations (u_d = 2^-53): the same operations on the
// same inputs. To first order the rounding error of an evaluation is a sum of the unit roundoff times
// condition numbers that belong to the expression and the inputs, not to the arithmetic, so
//     L_e - L  ~  (u_e / u_d) * (L_d - L) * rho = 2^-11 * (L_d - L) * rho,
// where rho is the ratio of two sums of rounding terms of the same weights: of order one, but not
// bounded, since one double evaluation may happen to round almost exactly (when one rounding dominates,
// rho is a ratio of two uniform variables and exceeds k with probability about 1/(2k)). Because the
// extended error is 2^-11 of the double error, |L_d - L_e| measures the double error |L_d - L|. Where the
// two sides are equal (L = R) their extended values then differ by at most
//     |L_e - R_e| <= 2^-11 * rho * (|L_d - L_e| + |R_d - R_e|).
// The tolerance allows rho up to 32, 2^-6 * (|L_d - L_e| + |R_d - R_e|), and takes the largest such
// estimate over four double evaluations: the exact one and three on inputs moved to a neighbouring
// double, which re-draw the rounding errors (and add the inputs' own sensitivity at that scale). All four
// would have to round almost exactly together to let rounding through (probability about (1/64)^4 per
// comparison where one rounding dominates). Two further safeguards: |L_d - R_d| is also a measure of the
// double errors when L = R (so 2^-6 of it is allowed), and a floor of 2^-56 of the values compared (at
// least 2^7 extended ulps) covers evaluations whose double and extended results coincide. A side that
// overflows in double but not in extended is inconclusive.
//
// A real counterexample, L != R with D = |L - R|, shows in both arithmetics: |L_e - R_e| and |L_d - R_d|
// are D up to rounding, while the tolerance is about 2^-6 of max(D, the double errors). So D exceeds the
// tolerance unless it is itself within a small multiple of the rounding error, where no comparison could
// tell it from rounding. A disagreement is reported only when both arithmetics exceed the tolerance, so a
// difference that one arithmetic's rounding created (a comparison that flips in one of them) is
// inconclusive rather than a counterexample.
Real agreement_tolerance(Real lhs_extended, const std::vector<Real>& lhs_doubles, Real rhs_extended,
                         const std::vector<Real>& rhs_doubles) {
  Real estimate = 0;
  for (size_t j = 0; j < lhs_doubles.size() && j < rhs_doubles.size(); ++j) {
    if (!std::isfinite(lhs_doubles[j]) || !std::isfinite(rhs_doubles[j])) continue;
    const Real double_errors =
        std::fabs(lhs_doubles[j] - lhs_extended) + std::fabs(rhs_doubles[j] - rhs_extended);
    estimate = std::fmax(estimate, std::fmax(double_errors, std::fabs(lhs_doubles[j] - rhs_doubles[j])));
  }
  const Real scale = std::fmax(std::fabs(lhs_extended), std::fabs(rhs_extended));
  return std::ldexp(estimate, -6) + std::ldexp(scale, -56);
}

Values perturbed(const Values& inputs, const std::vector<bool>& perturbable, uint64_t& seed) {
  Values out = inputs;
  for (size_t k = 0; k < out.size(); ++k) {
    // A small linear congruential generator: the perturbations need signs, not statistical quality.
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    // Moved to a neighbouring double: a smaller step could round back to the same double.
    if (k < perturbable.size() && perturbable[k] && std::isfinite(out[k]) && out[k] != 0) {
      const double x = static_cast<double>(out[k]);
      out[k] = std::nextafter(x, (seed >> 63) ? INFINITY : -INFINITY);
    }
  }
  return out;
}

namespace {

bool is_nan(Real x) {
  return std::isnan(x);
}

}  // namespace

Comparison compare(const std::vector<Type>& types, const Evaluated& lhs, const Evaluated& rhs,
                   bool infinities_are_evidence) {
  TWIST_CHECK(lhs.extended.size() == types.size() && rhs.extended.size() == types.size() &&
                  lhs.exact.size() == types.size() && rhs.exact.size() == types.size(),
              "comparing sides of {} component(s) with {} types", lhs.extended.size(), types.size());
  Comparison result;
  Real worst_ratio = 0;
  bool inconclusive = false;
  for (size_t k = 0; k < types.size(); ++k) {
    const Real le = lhs.extended[k], re = rhs.extended[k], ld = lhs.exact[k], rd = rhs.exact[k];
    if (is_nan(le) || is_nan(re) || is_nan(ld) || is_nan(rd)) {
      inconclusive = true;
      continue;
    }
    Real difference, tolerance;
    bool confirmed;
    if (!types[k].is_float() || !std::isfinite(le) || !std::isfinite(re)) {
      // Exact comparison; a difference counts only where double arithmetic computes the same values.
      // Equal infinities agree, but say little (a sum that overflowed to inf on both sides hides
      // whatever the combine did), so such an instance is not counted as evidence of agreement.
      if (le == re) {
        inconclusive |= types[k].is_float() && !infinities_are_evidence;
        continue;
      }
      difference =
          std::isfinite(le) && std::isfinite(re) ? std::fabs(le - re) : std::numeric_limits<Real>::infinity();
      tolerance = 0;
      confirmed = ld == le && rd == re;
    } else if (!std::isfinite(ld) || !std::isfinite(rd)) {
      inconclusive = true;
      continue;
    } else {
      std::vector<Real> lhs_doubles{ld}, rhs_doubles{rd};
      for (size_t j = 0; j < lhs.redrawn.size() && j < rhs.redrawn.size(); ++j) {
        lhs_doubles.push_back(lhs.redrawn[j][k]);
        rhs_doubles.push_back(rhs.redrawn[j][k]);
      }
      tolerance = agreement_tolerance(le, lhs_doubles, re, rhs_doubles);
      difference = std::fabs(le - re);
      if (difference <= tolerance) continue;
      confirmed = std::fabs(ld - rd) > tolerance;
    }
    if (!confirmed) {
      inconclusive = true;
      continue;
    }
    const Real ratio = tolerance > 0 ? difference / tolerance : std::numeric_limits<Real>::infinity();
    if (result.agreement != Agreement::disagree || ratio > worst_ratio) {
      result = Comparison{Agreement::disagree, static_cast<int>(k), difference, tolerance};
      worst_ratio = ratio;
    }
  }
  if (result.agreement != Agreement::disagree && inconclusive) result.agreement = Agreement::inconclusive;
  return result;
}

}  // namespace twist::algebra
