#pragma once
// Sum, max and min monoids for the reference backend's tests, written with MonoidBuilder. The real
// built-ins live in algebra/; these tests need only the plain definitions and stay independent of it.
#include "lang/monoid.h"

namespace twist::testing {

inline Monoid sum_monoid(const Type &t) {
  return MonoidBuilder("sum<" + type_name(t) + ">")
      .state({{"s", t}})
      .identity({constant(t, 0.0, "sum identity")})
      .combine([](const State &a, const State &b) { return std::vector<Expr>{a[0] + b[0]}; })
      .build();
}

inline Monoid max_monoid(const Type &t) {
  return MonoidBuilder("max<" + type_name(t) + ">")
      .state({{"m", t}})
      .identity({neg_infinity(t)})
      .combine([](const State &a, const State &b) { return std::vector<Expr>{max(a[0], b[0])}; })
      .build();
}

inline Monoid min_monoid(const Type &t) {
  return MonoidBuilder("min<" + type_name(t) + ">")
      .state({{"m", t}})
      .identity({infinity(t)})
      .combine([](const State &a, const State &b) { return std::vector<Expr>{min(a[0], b[0])}; })
      .build();
}

}  // namespace twist::testing
