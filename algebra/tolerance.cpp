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
// where rho is the ratio of two sums of rounding terms of the same weights: of order one for inputs
// whose significands are full of random bits. Then the extended error is 2^-11 of the double error,
// |L_d - L_e| measures the double error |L_d - L|, and where the two sides are equal (L = R)
//     |L_e - R_e| <= 2^-11 * rho * (|L_d - L_e| + |R_d - R_e|).
// Two things break the model at particular inputs. One evaluation may round almost exactly by chance (when
// one rounding dominates, rho is a ratio of two uniform variables and exceeds k with probability about
// 1/(2k)). And inputs with short significands, which the checker draws on purpose (sums of a few small
// dyadic numbers), can make both arithmetics round alike: the tail of an input swallowed by a large
// intermediate (M2 + n (mean - r)^2) is lost in extended as in double, so the extended error is no smaller.
// So the estimate is also taken at three nearby inputs, each input moved by a random relative amount
// between 2^-40 and 2^-20 (nearby()): their significands are full of random bits, the rounding errors are
// drawn afresh, and the conditioning is that of the instance. At each of the four inputs both sides are
// evaluated in both arithmetics, and the tolerance allows rho up to 32 for the largest estimate:
//     2^-6 * max over the four of max(|L_d - L_e| + |R_d - R_e|, |L_d - R_d|),
// where |L_d - R_d| is also a measure of the double errors when L = R. A floor of 2^-56 of the values
// compared (at least 2^7 extended ulps) covers evaluations that are exact in both arithmetics. A side that
// overflows in double but not in extended is inconclusive.
// One more case rounds alike in both arithmetics whatever the nearby inputs: an input more than 2^64
// times smaller than another it is added to, lost in extended as in double (-1 + 1e-300 + 1 == 0, so
// the identity -1 of x + y + 1 seems to fail on 1e-300; tiny + (-1.5 + 1.5) != (tiny + -1.5) + 1.5). No
// difference below the rounding of the largest input can be told from that, so a difference of at most
// 2^-48 of the largest input magnitude (2^5 double roundings of it) is not a disagreement. For sums this
// is the size of rounding; for products of large and small inputs it is looser, which costs only
// counterexamples whose difference hides below the inputs' rounding.
//
// A real counterexample, L != R with D = |L - R|, shows in both arithmetics: |L_e - R_e| and |L_d - R_d|
// are D up to rounding (and about D at the nearby inputs too), while the tolerance is about 2^-6 of
// max(D, the double errors). So D exceeds the tolerance unless it is itself within a small multiple of the
// rounding error, where no comparison could tell it from rounding. A disagreement is reported only when
// both arithmetics exceed the tolerance, so a difference that one arithmetic's rounding created (a
// comparison that flips in one of them) is inconclusive rather than a counterexample.
Real agreement_tolerance(const Evaluated &lhs, const Evaluated &rhs, size_t k) {
  Real estimate = 0;
  auto include = [&](Real le, Real ld, Real re, Real rd) {
    if (!std::isfinite(le) || !std::isfinite(ld) || !std::isfinite(re) || !std::isfinite(rd)) return;
    const Real double_errors = std::fabs(ld - le) + std::fabs(rd - re);
    estimate = std::fmax(estimate, std::fmax(double_errors, std::fabs(ld - rd)));
  };
  include(lhs.extended[k], lhs.exact[k], rhs.extended[k], rhs.exact[k]);
  const size_t n = std::min({lhs.nearby_extended.size(), lhs.nearby_exact.size(), rhs.nearby_extended.size(),
                             rhs.nearby_exact.size()});
  for (size_t j = 0; j < n; ++j)
    include(lhs.nearby_extended[j][k], lhs.nearby_exact[j][k], rhs.nearby_extended[j][k],
            rhs.nearby_exact[j][k]);
  const Real scale = std::fmax(std::fabs(lhs.extended[k]), std::fabs(rhs.extended[k]));
  return std::ldexp(estimate, -6) + std::ldexp(scale, -56);
}

Values nearby(const Values &inputs, const std::vector<bool> &movable, uint64_t &seed) {
  Values out = inputs;
  for (size_t k = 0; k < out.size(); ++k) {
    // A small linear congruential generator: the moves need random bits, not statistical quality.
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    if (k >= movable.size() || !movable[k] || !std::isfinite(out[k]) || out[k] == 0) continue;
    const int exponent = -20 - static_cast<int>((seed >> 59) % 21);                  // 2^-20 .. 2^-40
    const Real fraction = 1 + static_cast<Real>((seed >> 11) & 0xFFFFF) / 0x100000;  // [1, 2)
    const Real move = std::ldexp(fraction, exponent - 1) * ((seed >> 58) & 1 ? 1 : -1);
    // Rounded to double: the inputs stay values that both arithmetics read alike.
    out[k] = static_cast<double>(out[k] * (1 + move));
  }
  return out;
}

namespace {

bool is_nan(Real x) {
  return std::isnan(x);
}

}  // namespace

Comparison compare(const std::vector<Type> &types, const Evaluated &lhs, const Evaluated &rhs,
                   bool infinities_are_evidence, Real input_magnitude, bool nan_is_evidence) {
  TWIST_CHECK(lhs.extended.size() == types.size() && rhs.extended.size() == types.size() &&
                  lhs.exact.size() == types.size() && rhs.exact.size() == types.size(),
              "comparing sides of {} component(s) with {} types", lhs.extended.size(), types.size());
  Comparison result;
  Real worst_ratio = 0;
  bool inconclusive = false;
  for (size_t k = 0; k < types.size(); ++k) {
    const Real le = lhs.extended[k], re = rhs.extended[k], ld = lhs.exact[k], rd = rhs.exact[k];
    if (is_nan(le) || is_nan(re) || is_nan(ld) || is_nan(rd)) {
      // NaN on one side only, in both arithmetics, from the identity's own infinities, is a
      // disagreement: a missing guard (exp(-inf - -inf)) that one grouping reaches and the other does
      // not. Anything else with a NaN decides nothing.
      if (nan_is_evidence && is_nan(le) == is_nan(ld) && is_nan(re) == is_nan(rd) &&
          is_nan(le) != is_nan(re) && result.agreement != Agreement::disagree) {
        result =
            Comparison{Agreement::disagree, static_cast<int>(k), std::numeric_limits<Real>::infinity(), 0};
        worst_ratio = std::numeric_limits<Real>::infinity();
      } else {
        inconclusive = true;
      }
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
      tolerance = std::fmax(agreement_tolerance(lhs, rhs, k), std::ldexp(input_magnitude, -48));
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
