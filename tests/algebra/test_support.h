#pragma once
// Helpers shared by the algebra tests: comparisons that do not rely on the checker's own.
#include <cmath>
#include <limits>

#include "algebra/monoid_evaluator.h"
#include "algebra/tolerance.h"

namespace twist::algebra::testing {

// The same value bit for bit, for values of one floating-point or integer format carried as long double:
// equal with the same sign (so -0 and +0 differ), or both NaN.
inline bool same_bits(Real x, Real y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  return x == y && std::signbit(x) == std::signbit(y);
}

inline bool same_bits(const Values& a, const Values& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (!same_bits(a[k], b[k])) return false;
  return true;
}

// Two computations of one mathematical value, each in extended and in double arithmetic, agree: the
// non-finite components are identical, the others within agreement_tolerance of each other.
inline bool agree(const Evaluated& a, const Evaluated& b) {
  for (size_t k = 0; k < a.extended.size(); ++k) {
    const Real x = a.extended[k], y = b.extended[k];
    if (!std::isfinite(x) || !std::isfinite(y)) {
      if (!same_bits(x, y) && !(x == y)) return false;
      continue;
    }
    if (std::fabs(x - y) > agreement_tolerance(x, a.exact[k], y, b.exact[k])) return false;
  }
  return true;
}

inline std::string show(const Values& v) {
  std::string s = "(";
  for (Real x : v) s += fmt::format("{} ", static_cast<double>(x));
  return s + ")";
}

}  // namespace twist::algebra::testing
