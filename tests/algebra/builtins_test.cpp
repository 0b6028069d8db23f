// The built-in monoids: exact identities, the values they compute against direct references, masked
// rows, and every fold order against the sequential fold.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "algebra/builtins.h"
#include "algebra/fold_order.h"
#include "algebra/online.h"
#include "algebra/random_elements.h"
#include "lang/error.h"
#include "test_support.h"

using namespace twist;
using namespace twist::algebra;
using namespace twist::algebra::testing;

TEST_SUITE_BEGIN("algebra");

namespace {

struct Family {
  const char *name;
  Monoid (*make)(const Type &);
  bool meaningful_with_masked_scores;  // -inf elements make sense (max-like selections and softmax sums)
  // Whether e . a == a bit for bit even for a state a that equals the identity in value with zeros of the
  // other sign (not for the affine maps of dimension 2, see algebra/builtins.h).
  bool zero_signs_of_identity_exact = true;
};

const Family families[] = {
    {"sum", [](const Type &t) { return sum(t); }, true},
    {"product", [](const Type &t) { return product(t); }, false},
    {"max", [](const Type &t) { return max(t); }, true},
    {"min", [](const Type &t) { return min(t); }, false},
    {"argmax", [](const Type &t) { return argmax(t); }, true},
    {"argmin", [](const Type &t) { return argmin(t); }, false},
    {"softmax", [](const Type &t) { return softmax(t); }, true},
    {"log_sum_exp", [](const Type &t) { return log_sum_exp(t); }, true},
    {"attention", [](const Type &t) { return attention(t, 2); }, true},
    {"welford", [](const Type &t) { return welford(t); }, false},
    {"affine", [](const Type &t) { return affine(t); }, false},
    {"affine2", [](const Type &t) { return affine(t, 2); }, false, false},
    {"product(sum, argmax)",
     [](const Type &t) {
       return product({sum(t), argmax(t)});
     },
     true},
};

}  // namespace

TEST_CASE("combining with the identity returns the other state bit for bit in exact and typed f32 and f16") {
  struct Setting {
    Type type;
    Arithmetic arithmetic;
  };
  for (const Setting &setting : {Setting{f64, Arithmetic::exact}, Setting{f32, Arithmetic::exact},
                                 Setting{f32, Arithmetic::typed}, Setting{f16, Arithmetic::typed}}) {
    for (const Family &family : families) {
      const Monoid m = family.make(setting.type);
      CAPTURE(m.name);
      CAPTURE(static_cast<int>(setting.arithmetic));
      const MonoidEvaluator ev(m, setting.arithmetic);
      const ElementSampler sampler(m.elements);
      Rng rng(7);
      int checked = 0;
      for (int trial = 0; trial < 300; ++trial) {
        // Every regime, signed zeros and repeated values included; the states are reached by folding in
        // the arithmetic under test, sequentially from the identity or as a tree from lifted elements
        // (which reaches states such as -0 that a fold from the identity may not).
        const Regime regime =
            trial % 3 == 0 ? Regime::ties : (trial % 3 == 1 ? Regime::spread : Regime::masked);
        const std::vector<Values> x = sampler.list(rng, trial % 7, regime);
        std::vector<Values> states{
            fold_in_order(ev, x, trial % 2 ? FoldOrder::tree() : FoldOrder::sequential())};
        for (const Values &element : x) states.push_back(ev.lift(element));
        for (const Values &a : states) {
          INFO("a = ", show(a));
          if (!family.zero_signs_of_identity_exact && a == ev.identity()) {
            CHECK(ev.combine(ev.identity(), a) == a);
            CHECK(ev.combine(a, ev.identity()) == a);
            continue;
          }
          CHECK(same_bits(ev.combine(ev.identity(), a), a));
          CHECK(same_bits(ev.combine(a, ev.identity()), a));
        }
        ++checked;
      }
      CHECK(same_bits(ev.combine(ev.identity(), ev.identity()), ev.identity()));
      CHECK(checked == 300);
    }
  }
}

TEST_CASE("the built-ins compute their definitions against direct long-double references") {
  Rng rng(11);
  const ElementSampler scores({{"s", f64}});
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 1 + trial % 9;
    const Regime regime = trial % 2 ? Regime::ties : Regime::spread;
    std::vector<Values> s = scores.list(rng, n, regime);
    std::vector<Values> sv;  // (s, v0, v1) for attention
    std::vector<Values> vi;  // (value, index) for argmax/argmin
    for (int j = 0; j < n; ++j) {
      sv.push_back({s[j][0], Real(j) - 2, Real(j * j) / 7});
      vi.push_back({s[j][0], Real((j * 5) % n)});  // indices out of order, so ties test the index rule
    }
    auto ext = [](const Monoid &m) { return MonoidEvaluator(m, Arithmetic::extended); };
    auto close = [](Real got, Real want) { return std::fabs(got - want) <= 1e-15L * (1 + std::fabs(want)); };

    Real total = 0, prod = 1, hi = -INFINITY, lo = INFINITY;
    for (auto &x : s) total += x[0], prod *= x[0], hi = std::max(hi, x[0]), lo = std::min(lo, x[0]);
    CHECK(close(ext(sum(f64)).fold(s)[0], total));
    CHECK(close(ext(product(f64)).fold(s)[0], prod));
    CHECK(ext(max(f64)).fold(s)[0] == hi);
    CHECK(ext(min(f64)).fold(s)[0] == lo);

    // argmax / argmin: the extreme value, and among equal ones the smallest index.
    Values best_max{-INFINITY, Real(INT32_MAX)}, best_min{INFINITY, Real(INT32_MAX)};
    for (auto &x : vi) {
      if (x[0] > best_max[0] || (x[0] == best_max[0] && x[1] < best_max[1])) best_max = x;
      if (x[0] < best_min[0] || (x[0] == best_min[0] && x[1] < best_min[1])) best_min = x;
    }
    CHECK(ext(argmax(f64)).fold(vi) == best_max);
    CHECK(ext(argmin(f64)).fold(vi) == best_min);

    // softmax, log-sum-exp and attention.
    Real l = 0, o0 = 0, o1 = 0;
    for (auto &x : sv) {
      const Real p = std::exp(x[0] - hi);
      l += p, o0 += p * x[1], o1 += p * x[2];
    }
    const auto sm = ext(softmax(f64)).fold(s);
    CHECK(sm[0] == hi);
    CHECK(close(sm[1], l));
    const MonoidEvaluator lse = ext(log_sum_exp(f64));
    CHECK(close(lse.finalize(lse.fold(s))[0], hi + std::log(l)));
    const MonoidEvaluator att = ext(attention(f64, 2));
    const Values out = att.finalize(att.fold(sv));
    CHECK(close(out[0], o0 / l));
    CHECK(close(out[1], o1 / l));

    // Welford against the two-pass mean and (population) variance.
    Real mean = total / n, squares = 0;
    for (auto &x : s) squares += (x[0] - mean) * (x[0] - mean);
    const MonoidEvaluator w = ext(welford(f64));
    const Values stats = w.finalize(w.fold(s));
    CHECK(close(stats[0], mean));
    CHECK(std::fabs(stats[1] - squares / n) <= 1e-14L * (1 + squares / n));

    // affine: the composed map equals running the recurrence h = a*h + b from any h0.
    std::vector<Values> maps;
    for (int j = 0; j < n; ++j) maps.push_back({s[j][0], sv[j][2]});
    const Values composed = ext(affine(f64)).fold(maps);
    const Real h0 = 0.75;
    Real h = h0;
    for (auto &ab : maps) h = ab[0] * h + ab[1];
    CHECK(close(composed[0] * h0 + composed[1], h));
  }
}

TEST_CASE(
    "a fully masked row finalizes to 0 in attention and never to NaN while softmax keeps l = 0 and "
    "log-sum-exp is -inf") {
  for (const Type &t : {f16, f32, f64}) {
    for (Arithmetic arithmetic : {Arithmetic::exact, Arithmetic::typed, Arithmetic::extended}) {
      CAPTURE(type_name(t));
      const Real inf = std::numeric_limits<Real>::infinity();
      const MonoidEvaluator att(attention(t, 2), arithmetic), sm(softmax(t), arithmetic),
          lse(log_sum_exp(t), arithmetic);
      for (int n : {0, 1, 5}) {
        const std::vector<Values> masked(n, Values{-inf, 3.0, -2.0});
        const Values out = att.finalize(att.fold(masked));
        CHECK(out[0] == 0);
        CHECK(out[1] == 0);
        const Values state = sm.fold(std::vector<Values>(n, Values{-inf}));
        CHECK(state[0] == -inf);
        CHECK(state[1] == 0);
        CHECK(lse.finalize(lse.fold(std::vector<Values>(n, Values{-inf})))[0] == -inf);
      }
      // A partly masked row is the unmasked part's.
      const Values partly =
          att.finalize(att.fold(std::vector<Values>{{-inf, 9, 9}, {0.5, 1, 2}, {-inf, 7, 7}}));
      CHECK(partly[0] == 1);
      CHECK(partly[1] == 2);
    }
  }
}

TEST_CASE("tiled and tree and split folds of every built-in agree with the sequential fold") {
  const FoldOrder orders[] = {FoldOrder::tiled(1), FoldOrder::tiled(4), FoldOrder::tiled(16),
                              FoldOrder::tree(),   FoldOrder::split(1), FoldOrder::split(3),
                              FoldOrder::split(8)};
  for (const Family &family : families) {
    const Monoid m = family.make(f64);
    CAPTURE(m.name);
    const MonoidEvaluator ext(m, Arithmetic::extended), dbl(m, Arithmetic::exact);
    const ElementSampler sampler(m.elements);
    Rng rng(5);
    std::vector<Regime> regimes{Regime::spread, Regime::ties};
    if (family.meaningful_with_masked_scores) regimes.push_back(Regime::masked);
    for (Regime regime : regimes)
      for (int length : {0, 1, 2, 7, 33, 100}) {
        const std::vector<Values> x = sampler.list(rng, length, regime);
        const Evaluated sequential = evaluate(
            ext, dbl, m.elements, x,
            [](const MonoidEvaluator &ev, const std::vector<Values> &list) { return ev.fold(list); });
        for (const FoldOrder &order : orders) {
          CAPTURE(order.name());
          CAPTURE(length);
          const Evaluated reordered = evaluate(
              ext, dbl, m.elements, x, [&](const MonoidEvaluator &ev, const std::vector<Values> &list) {
                return fold_in_order(ev, list, order);
              });
          INFO("sequential ", show(sequential.exact), " reordered ", show(reordered.exact));
          CHECK(agree(reordered, sequential));
        }
      }
  }
}

TEST_CASE("the product of monoids is componentwise and names its components") {
  const Monoid p = product({sum(f32), sum(f32), max(f32)});
  REQUIRE(p.state.size() == 3);
  CHECK(p.state[0].name == "sum_0");
  CHECK(p.state[1].name == "sum_1");
  CHECK(p.state[2].name == "max");
  CHECK(p.origin == Monoid::Origin::product);
  CHECK(p.factors.size() == 3);
  const MonoidEvaluator ev(p, Arithmetic::exact);
  CHECK(ev.combine({1, 2, 3}, {10, 20, -1}) == Values{11, 22, 3});
  CHECK(ev.lift({4, 5, 6}) == Values{4, 5, 6});
  const Monoid renamed = product({max(f32), sum(f32)}, {"m", "l"});
  CHECK(renamed.state[0].name == "m");
  CHECK(renamed.state[1].name == "l");
  CHECK_THROWS_WITH_AS(product({max(f32), sum(f32)}, {"m"}), doctest::Contains("state name"), twist::Error);
  CHECK_THROWS_AS(product(std::vector<Monoid>{}), twist::Error);
}

TEST_SUITE_END();
