// Level 5: monoids derived from leftward folds.
#include <doctest/doctest.h>

#include "algebra/builtins.h"
#include "algebra/derive.h"
#include "algebra/random_elements.h"
#include "lang/error.h"
#include "test_support.h"

using namespace twist;
using namespace twist::algebra;
using namespace twist::algebra::testing;

TEST_SUITE_BEGIN("algebra");

namespace {

// h = 0.9 h + 0.1 x: an exponential moving average.
LeftFold moving_average() {
  LeftFold f{"moving_average", {{"h", f64}}, {{"x", f64}}, {Expr(0.0)}, {}, {}};
  f.step = {f.current()["h"] * 0.9 + f.element()["x"] * 0.1};
  return f;
}

// A damped oscillator driven by x, two state components coupled linearly, with a select on the element.
LeftFold oscillator() {
  LeftFold f{"oscillator", {{"p", f64}, {"v", f64}}, {{"x", f64}}, {Expr(1.0), Expr(0.0)}, {}, {}};
  const State s = f.current(), x = f.element();
  f.step = {s["p"] + s["v"] * 0.25, s["v"] * 0.9 - s["p"] * 0.25 + select(x["x"] > 0, x["x"], 0)};
  return f;
}

// Weighted moments (West's incremental algorithm): elements (x, log_weight) of weight exp(log_weight) > 0,
// state (w, mean, M2). Not affine in the state; its weak right inverse is two elements of half the weight
// each at mean -+ the standard deviation (for the empty state, weight exp(-inf) = 0).
LeftFold weighted_moments(bool good_inverse) {
  LeftFold f{"weighted_moments",
             {{"w", f64}, {"mean", f64}, {"M2", f64}},
             {{"x", f64}, {"log_weight", f64}},
             {Expr(0.0), Expr(0.0), Expr(0.0)},
             {},
             {}};
  const State s = f.current(), x = f.element();
  const Expr weight = exp(x["log_weight"]);
  const Expr w = s["w"] + weight;
  const Expr delta = x["x"] - s["mean"];
  const Expr mean = select(w == 0, s["mean"], s["mean"] + delta * weight / w);
  f.step = {w, mean, s["M2"] + delta * (x["x"] - mean) * weight};
  const Expr deviation = select(s["w"] == 0, 0, sqrt(s["M2"] / s["w"]));
  const Expr half = log(s["w"] / 2);
  if (good_inverse)
    f.weak_right_inverse = {{s["mean"] - deviation, half}, {s["mean"] + deviation, half}};
  else
    f.weak_right_inverse = {{s["mean"], log(s["w"])}};  // forgets the spread: h(g(s)) loses M2
  return f;
}

}  // namespace

TEST_CASE("a step affine in the state derives the affine monoid whose fold is the given fold") {
  for (const LeftFold &fold : {moving_average(), oscillator()}) {
    CAPTURE(fold.name);
    const Derivation d = derive_monoid(fold);
    INFO(d.verdict.to_string());
    REQUIRE(d.monoid);
    CHECK(d.verdict.accepted);
    CHECK(d.verdict.level == Level::derived);
    CHECK(d.monoid->origin == Monoid::Origin::derived);
    // The combine is the library's composition of affine maps, not a new one.
    CHECK(d.monoid->combine.size() == affine(f64, static_cast<int>(fold.state.size())).combine.size());
    // An independent check of the derived monoid: its fold, in any order, runs the recurrence.
    const MonoidEvaluator ev(*d.monoid, Arithmetic::extended);
    const ElementSampler sampler(fold.elements);
    Rng rng(9);
    for (int trial = 0; trial < 20; ++trial) {
      const std::vector<Values> x = sampler.list(rng, trial, Regime::spread);
      Values s(fold.state.size());
      for (size_t k = 0; k < s.size(); ++k) s[k] = fold.initial[k].as<Halide::Internal::FloatImm>()->value;
      for (const Values &xi : x) {
        if (fold.state.size() == 1) {
          s = {0.9L * s[0] + 0.1L * xi[0]};
        } else {
          s = {s[0] + s[1] * 0.25L, s[1] * 0.9L - s[0] * 0.25L + (xi[0] > 0 ? xi[0] : 0)};
        }
      }
      const Values got = ev.finalize(ev.fold(x));
      for (size_t k = 0; k < s.size(); ++k) CHECK(std::fabs(got[k] - s[k]) <= 1e-15L * (1 + std::fabs(s[k])));
    }
  }
}

TEST_CASE("a weak right inverse derives the combine h(g(s) ++ g(t))") {
  const Derivation d = derive_monoid(weighted_moments(true));
  INFO(d.verdict.to_string());
  REQUIRE(d.monoid);
  CHECK(d.verdict.accepted);
  CHECK(d.verdict.level == Level::derived);
  CHECK(d.verdict.reason.find("weak right inverse") != std::string::npos);
  // The derived combine is Chan's combine in disguise: compare with the mean and M2 of the union directly.
  const MonoidEvaluator ev(*d.monoid, Arithmetic::extended);
  const Real one = 0, two = std::log(2.0L);                                // log weights
  const Values a = ev.fold(std::vector<Values>{{1.0, one}, {3.0, one}});   // w 2, mean 2, M2 2
  const Values b = ev.fold(std::vector<Values>{{10.0, two}, {4.0, one}});  // w 3, mean 8, M2 24
  const Values ab = ev.combine(a, b);
  CHECK(std::fabs(ab[0] - 5) < 1e-15L);
  CHECK(std::fabs(ab[1] - 5.6L) < 1e-15L);
  // M2 of {1, 3, 10, 10, 4} about its mean 5.6.
  const Real m2 = (4.6L * 4.6L + 2.6L * 2.6L + 2 * 4.4L * 4.4L + 1.6L * 1.6L);
  CHECK(std::fabs(ab[2] - m2) < 1e-13L);
}

TEST_CASE("derivations that do not apply or do not hold are refused with the reason") {
  SUBCASE("a nonlinear step without a weak right inverse") {
    LeftFold f{"square_plus", {{"h", f64}}, {{"x", f64}}, {Expr(0.0)}, {}, {}};
    f.step = {f.current()[0] * f.current()[0] + f.element()[0]};
    const Derivation d = derive_monoid(f);
    INFO(d.verdict.to_string());
    CHECK(!d.monoid);
    CHECK(!d.verdict.accepted);
    CHECK(d.verdict.reason.find("no derivation applies") != std::string::npos);
    CHECK(d.verdict.to_string().find("not affine in the state") != std::string::npos);
  }
  SUBCASE("a g that is not a weak right inverse") {
    const Derivation d = derive_monoid(weighted_moments(false));
    INFO(d.verdict.to_string());
    CHECK(!d.verdict.accepted);
    REQUIRE(d.verdict.counterexample);
    CHECK(d.verdict.counterexample->law == Law::weak_right_inverse);
    CHECK(d.verdict.counterexample->difference > d.verdict.counterexample->tolerance);
  }
  SUBCASE("a weak right inverse of a fold that is no homomorphism gives a combine that is not associative") {
    // h = max(h, x) - 1 discounts what came before; g(s) = [s + 1] is a weak right inverse (h([s + 1]) == s
    // from h0 = -inf), but s . t = max(s, t + 1) - 1 is not associative: the fold is not a rightward fold.
    LeftFold f{"discounted_max", {{"h", f64}}, {{"x", f64}}, {Expr(-INFINITY)}, {}, {}};
    f.step = {max(f.current()[0], f.element()[0]) - 1};
    f.weak_right_inverse = {{f.current()[0] + 1}};
    const Derivation d = derive_monoid(f);
    INFO(d.verdict.to_string());
    CHECK(!d.verdict.accepted);
    REQUIRE(d.verdict.counterexample);
    CHECK(d.verdict.counterexample->law != Law::weak_right_inverse);
  }
  SUBCASE("malformed folds") {
    LeftFold f{"broken", {{"h", f64}}, {{"x", f64}}, {Expr(0.0)}, {}, {}};
    CHECK_THROWS_WITH_AS(derive_monoid(f), doctest::Contains("one expression per state component"),
                         twist::Error);
    f.step = {f.element()[0]};
    f.initial = {f.element()[0]};
    CHECK_THROWS_WITH_AS(derive_monoid(f), doctest::Contains("must be a constant"), twist::Error);
  }
}

TEST_CASE("a step given with the user's combine is derived with that combine and held to the step") {
  // A running maximum: the step is not affine in the state and there is no weak right inverse, so only the
  // user's combine lets the derivation apply.
  LeftFold running_max{"running_max", {{"m", f64}}, {{"x", f64}}, {Expr(-INFINITY)}, {}, {}};
  running_max.step = {max(running_max.current()["m"], running_max.element()["x"])};
  const Derivation without = derive_monoid(running_max);
  CHECK(!without.monoid);
  CHECK(without.verdict.reason.find("LeftFold::combine") != std::string::npos);
  running_max.combine = {max(running_max.lhs()["m"], running_max.rhs()["m"])};
  const Derivation with = derive_monoid(running_max);
  INFO(with.verdict.to_string());
  REQUIRE(with.monoid);
  CHECK(with.verdict.accepted);
  CHECK(with.verdict.level == Level::derived);
  CHECK(with.verdict.reason.find("the given combine") != std::string::npos);
  CHECK(!with.monoid->step.empty());

  // A monoid's own step and combine, through left_fold(): an argmax whose step takes the later of two ties
  // while its combine keeps the earlier is refused with a counterexample.
  auto argmax_with_step = [](bool later_ties) {
    return MonoidBuilder(later_ties ? "argmax_later_ties" : "argmax_earlier_ties")
        .state({{"v", f64}, {"i", i32}})
        .domain("v", Domain{.lo = -1e300, .hi = 1e300})
        .identity({-INFINITY, Expr(-1)})
        .combine([](const State &a, const State &b) {
          const Expr take_b = b["v"] > a["v"];
          return std::vector<Expr>{select(take_b, b["v"], a["v"]), select(take_b, b["i"], a["i"])};
        })
        .step([=](const State &s, const State &x) {
          const Expr take_x = later_ties ? x["v"] >= s["v"] : x["v"] > s["v"];
          return std::vector<Expr>{select(take_x, x["v"], s["v"]), select(take_x, x["i"], s["i"])};
        })
        .build();
  };
  const Derivation agreeing = derive_monoid(left_fold(argmax_with_step(false)));
  INFO(agreeing.verdict.to_string());
  CHECK(agreeing.verdict.accepted);
  const Derivation disagreeing = derive_monoid(left_fold(argmax_with_step(true)));
  INFO(disagreeing.verdict.to_string());
  CHECK(!disagreeing.verdict.accepted);
  CHECK(disagreeing.verdict.counterexample);
  const Monoid no_step =
      MonoidBuilder("no_step")
          .state({{"x", f64}})
          .identity({0.0})
          .combine([](const State &a, const State &b) { return std::vector<Expr>{a[0] + b[0]}; })
          .build();
  CHECK_THROWS_WITH_AS(left_fold(no_step), doctest::Contains("MonoidBuilder::step"), Error);
}

TEST_SUITE_END();
