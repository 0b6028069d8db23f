// Twisted monoids: the library's twists derive the same combines as the hand-written built-ins, the
// builder refuses malformed twists, and the checker tells an r-dependent transport from an independent one.
#include <doctest/doctest.h>

#include "algebra/builtins.h"
#include "algebra/check.h"
#include "algebra/laws.h"
#include "algebra/online.h"
#include "algebra/substitution.h"
#include "algebra/twist.h"
#include "lang/error.h"
#include "test_support.h"

using namespace twist;
using namespace twist::algebra;
using namespace twist::algebra::testing;

TEST_SUITE_BEGIN("algebra");

TEST_CASE("the twisted combines agree with the hand-written built-in combines on random reachable states") {
  struct Pair {
    Monoid builtin, twisted;
  };
  for (const Type &t : {f32, f64}) {
    const std::vector<Pair> pairs = {{softmax(t), twisted_softmax(t)},
                                     {log_sum_exp(t), twisted_log_sum_exp(t)},
                                     {attention(t, 3), twisted_attention(t, 3)},
                                     {welford(t), twisted_welford(t)}};
    for (const Pair &p : pairs) {
      CAPTURE(p.builtin.name);
      CHECK(p.builtin.origin == Monoid::Origin::builtin);
      CHECK(p.twisted.origin == Monoid::Origin::twisted);
      // Same carrier, same identity, same lift: only the combine is derived rather than written.
      REQUIRE(p.twisted.state.size() == p.builtin.state.size());
      const MonoidEvaluator be(p.builtin, Arithmetic::extended), bd(p.builtin, Arithmetic::exact);
      const MonoidEvaluator te(p.twisted, Arithmetic::extended), td(p.twisted, Arithmetic::exact);
      CHECK(be.identity() == te.identity());
      // The states are the built-in's reachable states (folds of random lists, ties and -inf included).
      CheckOptions options;
      const LawTester tester(p.builtin, options);
      const auto &states = tester.reachable_states();
      Rng rng(3);
      int compared = 0;
      for (int trial = 0; trial < 400; ++trial) {
        const Values &a = states[rng() % states.size()];
        const Values &b = states[rng() % states.size()];
        auto combine = [](const MonoidEvaluator &ev, const std::vector<Values> &s) {
          return ev.combine(s[0], s[1]);
        };
        const Evaluated hand = evaluate(be, bd, p.builtin.state, {a, b}, combine);
        const Evaluated derived = evaluate(te, td, p.builtin.state, {a, b}, combine);
        // A NaN means the states are outside the domain (Welford's mean of a list holding -inf).
        if (has_nan(hand.extended) || has_nan(derived.extended)) continue;
        INFO("a = ", show(a), " b = ", show(b), " hand ", show(hand.extended), " derived ",
             show(derived.extended));
        CHECK(agree(hand, derived));
        ++compared;
      }
      CHECK(compared > 300);
    }
  }
}

TEST_CASE("built-ins with a reference carry the twist that explains them") {
  const Monoid s = softmax(f32);
  REQUIRE(s.twist);
  CHECK(s.twist->base->state.size() == 2);
  CHECK(s.twist->base->state[0].name == "m");
  CHECK(reference_type(*s.twist) == f32);
  const Monoid w = welford(f64);
  REQUIRE(w.twist);
  CHECK(w.twist->base->state[1].name == "s1");
  CHECK(!sum(f32).twist);
}

TEST_CASE("the twist builder refuses malformed twists naming the monoid and what to do") {
  const Monoid base = product({max(f32), sum(f32)}, {"m", "l"});
  auto softmax_like = [&] {
    return TwistBuilder("bad_twist", base)
        .state({{"m", f32}, {"l", f32}})
        .identity({-INFINITY, 0.0})
        .to_base([](const State &s, const Expr &) { return s.vars(); })
        .from_base([](const State &b, const Expr &) { return b.vars(); });
  };
  CHECK_NOTHROW(softmax_like().build());
  CHECK_THROWS_WITH_AS(TwistBuilder("bad_twist", base).state({{"m", f32}, {"l", f32}}).build(),
                       doctest::Contains("needs both to_base"), twist::Error);
  CHECK_THROWS_WITH_AS(
      softmax_like().to_base([](const State &s, const Expr &) { return std::vector<Expr>{s[0]}; }).build(),
      doctest::Contains("gives 1 value(s) but 2 are needed"), twist::Error);
  CHECK_THROWS_WITH_AS(softmax_like()
                           .to_base([](const State &s, const Expr &) {
                             return std::vector<Expr>{s[0], s[1] * exp(s[0] - variable(f32, "ref"))};
                           })
                           .build(),
                       doctest::Contains("declare one with reference()"), twist::Error);
  CHECK_THROWS_WITH_AS(
      softmax_like().reference(f32, [](const State &a, const State &) { return a[0]; }).build(),
      doctest::Contains("neither psi nor psi^-1 uses it"), twist::Error);
  CHECK_THROWS_WITH_AS(softmax_like()
                           .from_base([](const State &b, const Expr &) {
                             return std::vector<Expr>{b[0], cast(f64, b[1])};
                           })
                           .build(),
                       doctest::Contains("has type f64 but the component is f32"), twist::Error);
}

TEST_CASE("a twist with a reference proves associativity only if its transport does not depend on r") {
  // psi^-1 forgets to undo the rescale. With the rule r = max(a.m, b.m) the combine still comes out right
  // (exp(r - max) = 1 there), but at any other r the transport differs, so level 1 must not accept it.
  auto rescale = [](const Expr &m, const Expr &r) { return select(m == -INFINITY, 0, exp(m - r)); };
  const Monoid m = TwistBuilder("softmax_inverse_forgets_rescale", product({max(f64), sum(f64)}, {"m", "l"}))
                       .state({{"m", f64}, {"l", f64}})
                       .elements({{"s", f64}})
                       .identity({-INFINITY, 0.0})
                       .lift([](const State &x) {
                         return std::vector<Expr>{x[0], select(x[0] == -INFINITY, 0.0, 1.0)};
                       })
                       .reference(f64, [](const State &a, const State &b) { return max(a["m"], b["m"]); })
                       .to_base([=](const State &s, const Expr &r) {
                         return std::vector<Expr>{s["m"], s["l"] * rescale(s["m"], r)};
                       })
                       .from_base([](const State &b, const Expr &) { return b.vars(); })
                       .build();
  CheckOptions options;
  LawTester tester(m, options);
  const std::vector<LawResult> premises = tester.twist_premises();
  REQUIRE(premises[0].law == Law::transport);
  REQUIRE(premises[0].counterexample);
  // The counterexample names the reference at which the transport differs from the combine.
  CHECK(premises[0].counterexample->reference.has_value());
  const Verdict v = check_associativity(m);
  INFO(v.to_string());
  CHECK(v.accepted);
  CHECK(v.level == Level::tested);
  CHECK(v.to_string().find("depends on the reference r") != std::string::npos);

  // The library's twists pass every premise.
  for (const Monoid &good : {twisted_softmax(f64), twisted_attention(f64, 2), twisted_welford(f64)}) {
    LawTester t(good, options);
    for (const LawResult &r : t.twist_premises()) {
      CAPTURE(good.name);
      CAPTURE(r.summary());
      CHECK(r.passed(options.trials));
    }
  }
}

TEST_CASE("a twist's maps may bind names with Let, and the twist still proves its combine") {
  using Halide::Internal::Let;
  using Halide::Internal::Variable;
  // psi(m, l; r) = (m, l * scale) with scale = exp(m - r) bound once by a Let, as generated code would.
  auto scaled = [](const Expr &l, const Expr &exponent) {
    return Expr(Let::make("scale", exp(exponent), l * Expr(Variable::make(f64, "scale"))));
  };
  const Monoid m =
      TwistBuilder("softmax_through_lets", product({max(f64), sum(f64)}, {"m", "l"}))
          .state({{"m", f64}, {"l", f64}})
          .elements({{"s", f64}})
          .identity({-INFINITY, 0.0})
          .lift([](const State &x) {
            return std::vector<Expr>{x[0], select(x[0] == -INFINITY, 0.0, 1.0)};
          })
          .reference(f64, [](const State &a, const State &b) { return max(a["m"], b["m"]); })
          .to_base([&](const State &s, const Expr &r) {
            return std::vector<Expr>{s["m"], select(s["m"] == -INFINITY, 0.0, scaled(s["l"], s["m"] - r))};
          })
          .from_base([&](const State &b, const Expr &r) {
            return std::vector<Expr>{b["m"], select(b["m"] == -INFINITY, 0.0, scaled(b["l"], r - b["m"]))};
          })
          .build();
  const Verdict v = check_associativity(m);
  INFO(v.to_string());
  CHECK(v.accepted);
  CHECK(v.level == Level::construction);
}

TEST_SUITE_END();
