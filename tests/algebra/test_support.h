#pragma once
// Helpers shared by the algebra tests: comparisons that do not rely on the checker's own, and the monoids
// that more than one test uses.
#include <cmath>
#include <functional>
#include <limits>

#include "algebra/builtins.h"
#include "algebra/monoid_evaluator.h"
#include "algebra/tolerance.h"
#include "algebra/twist.h"

namespace twist::algebra::testing {

// The same value bit for bit, for values of one floating-point or integer format carried as long double:
// equal with the same sign (so -0 and +0 differ), or both NaN.
inline bool same_bits(Real x, Real y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  return x == y && std::signbit(x) == std::signbit(y);
}

inline bool same_bits(const Values &a, const Values &b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k)
    if (!same_bits(a[k], b[k])) return false;
  return true;
}

// Two computations of one mathematical value, each in extended and in double arithmetic, agree: the
// non-finite components are identical, the others within agreement_tolerance of each other.
inline bool agree(const Evaluated &a, const Evaluated &b) {
  for (size_t k = 0; k < a.extended.size(); ++k) {
    const Real x = a.extended[k], y = b.extended[k];
    if (!std::isfinite(x) || !std::isfinite(y)) {
      if (!same_bits(x, y) && !(x == y)) return false;
      continue;
    }
    if (std::fabs(x - y) > agreement_tolerance(a, b, k)) return false;
  }
  return true;
}

// f evaluated in extended and in exact arithmetic, at the inputs and at three nearby inputs (see
// Evaluated in algebra/tolerance.h). `inputs` are lists of
// values of the components `components`.
inline Evaluated evaluate(
    const MonoidEvaluator &extended, const MonoidEvaluator &exact, const std::vector<Component> &components,
    const std::vector<Values> &inputs,
    const std::function<Values(const MonoidEvaluator &, const std::vector<Values> &)> &f) {
  std::vector<bool> floating;
  for (const Component &c : components) floating.push_back(c.type.is_float());
  Evaluated out{f(extended, inputs), f(exact, inputs)};
  uint64_t seed = 12345;
  for (int j = 0; j < 3; ++j) {
    std::vector<Values> near;
    for (const Values &v : inputs) near.push_back(nearby(v, floating, seed));
    out.nearby_extended.push_back(f(extended, near));
    out.nearby_exact.push_back(f(exact, near));
  }
  return out;
}

inline bool has_nan(const Values &v) {
  for (Real x : v)
    if (std::isnan(x)) return true;
  return false;
}

inline std::string show(const Values &v) {
  std::string s = "(";
  for (Real x : v) s += fmt::format("{} ", static_cast<double>(x));
  return s + ")";
}

// The running statistic of an RMS norm as a twist without reference: psi(n, rms) = (n, n * rms^2) onto
// (+, +).
inline Monoid root_mean_square() {
  return TwistBuilder("root_mean_square", product({sum(f64), sum(f64)}, {"n", "sum_squares"}))
      .state({{"n", f64}, {"rms", f64}})
      .elements({{"x", f64}})
      .identity({0.0, 0.0})
      .lift([](const State &x) {
        return std::vector<Expr>{Expr(1.0), abs(x[0])};
      })
      .to_base([](const State &s, const Expr &) {
        return std::vector<Expr>{s["n"], s["n"] * s["rms"] * s["rms"]};
      })
      .from_base([](const State &b, const Expr &) {
        return std::vector<Expr>{b["n"], select(b["n"] == 0, 0, sqrt(b["sum_squares"] / b["n"]))};
      })
      .build();
}

// h -> a h + b composed by hand, a user's monoid (so the checker decides, not the construction): associative,
// and commutative only for maps that happen to commute. Declared commutative or not, so that tests see the
// claim checked.
inline Monoid affine_by_hand(bool declared_commutative) {
  return MonoidBuilder("affine_by_hand")
      .state({{"a", f64}, {"b", f64}})
      .identity({1.0, 0.0})
      .combine([](const State &l, const State &r) {
        return std::vector<Expr>{l["a"] * r["a"], r["a"] * l["b"] + r["b"]};
      })
      .commutative(declared_commutative)
      .build();
}

}  // namespace twist::algebra::testing
