// The checker on a corpus of operations: associative ones (several only secretly so), each accepted at
// the level expected to decide it, and non-associative look-alikes, each refused with a counterexample
// that is re-evaluated here, independently of the checker's own comparison.
#include <doctest/doctest.h>

#include <cmath>

#include "algebra/builtins.h"
#include "algebra/check.h"
#include "algebra/online.h"
#include "algebra/tolerance.h"
#include "algebra/twist.h"
#include "test_support.h"

using namespace twist;
using namespace twist::algebra;
using twist::algebra::testing::root_mean_square;

TEST_SUITE_BEGIN("algebra");

namespace {

using Combine = MonoidBuilder::Fn2;

Monoid scalar(const std::string &name, double identity, const Combine &combine) {
  return MonoidBuilder(name).state({{"x", f64}}).identity({identity}).combine(combine).build();
}

Monoid argmin_halide_style() {
  // Halide's own argmin pattern: ties go to the right operand, which is associative too (the last minimum).
  return MonoidBuilder("argmin_halide_style")
      .state({{"v", f64}, {"i", i32}})
      .identity({infinity(f64), Expr(0)})
      .combine([](const State &a, const State &b) {
        return std::vector<Expr>{min(a["v"], b["v"]), select(a["v"] < b["v"], a["i"], b["i"])};
      })
      .build();
}

Monoid complex_product() {
  return MonoidBuilder("complex_product")
      .state({{"re", f64}, {"im", f64}})
      .identity({1.0, 0.0})
      .combine([](const State &a, const State &b) {
        return std::vector<Expr>{a["re"] * b["re"] - a["im"] * b["im"],
                                 a["re"] * b["im"] + a["im"] * b["re"]};
      })
      .build();
}

Monoid plain_affine() {
  return MonoidBuilder("affine_by_hand")
      .state({{"a", f64}, {"b", f64}})
      .identity({1.0, 0.0})
      .combine([](const State &p, const State &q) {
        return std::vector<Expr>{q["a"] * p["a"], q["a"] * p["b"] + q["b"]};
      })
      .build();
}

// 2x2 matrices over the (max, +) semiring: the product is associative because + distributes over max.
Monoid max_plus_matrices(bool transposed_by_mistake) {
  return MonoidBuilder(transposed_by_mistake ? "max_plus_2x2_transposed" : "max_plus_2x2")
      .state({{"m00", f64}, {"m01", f64}, {"m10", f64}, {"m11", f64}})
      .identity({0.0, -INFINITY, -INFINITY, 0.0})
      .combine([=](const State &a, const State &b) {
        auto A = [&](int i, int j) { return a[2 * i + j]; };
        auto B = [&](int i, int j) { return transposed_by_mistake ? b[2 * j + i] : b[2 * i + j]; };
        std::vector<Expr> out;
        for (int i = 0; i < 2; ++i)
          for (int j = 0; j < 2; ++j) out.push_back(max(A(i, 0) + B(0, j), A(i, 1) + B(1, j)));
        return out;
      })
      .build();
}

Monoid single_component_log_sum_exp() {
  return MonoidBuilder("log_sum_exp_one_component")
      .state({{"lse", f64}})
      .identity({-INFINITY})
      .combine([](const State &a, const State &b) {
        const Expr hi = max(a[0], b[0]), lo = min(a[0], b[0]);
        return std::vector<Expr>{select(lo == -INFINITY, hi, hi + log(1.0 + exp(lo - hi)))};
      })
      .build();
}

// Welford and online softmax written by hand, as a user would: the checker does not trust them.
Monoid welford_by_hand(bool wrong_correction) {
  return MonoidBuilder(wrong_correction ? "welford_wrong_correction" : "welford_by_hand")
      .state({{"n", f64}, {"mean", f64}, {"M2", f64}})
      .elements({{"x", f64}})
      .identity({0.0, 0.0, 0.0})
      .lift([](const State &x) {
        return std::vector<Expr>{Expr(1.0), x[0], Expr(0.0)};
      })
      .combine([=](const State &a, const State &b) {
        const Expr n = a["n"] + b["n"], d = b["mean"] - a["mean"];
        const Expr correction = wrong_correction ? d * d * a["n"] * b["n"] : d * d * a["n"] * b["n"] / n;
        return std::vector<Expr>{n, select(n == 0, 0, a["mean"] + d * b["n"] / n),
                                 a["M2"] + b["M2"] + select(n == 0, 0, correction)};
      })
      .build();
}

Monoid softmax_by_hand(bool wrong_rescale) {
  auto rescale = [](const Expr &m, const Expr &to) { return select(m == -INFINITY, 0, exp(m - to)); };
  return MonoidBuilder(wrong_rescale ? "softmax_wrong_rescale" : "softmax_by_hand")
      .state({{"m", f32}, {"l", f32}})
      .elements({{"s", f32}})
      .identity({-INFINITY, 0.0})
      .lift([](const State &x) {
        return std::vector<Expr>{x[0], select(x[0] == -INFINITY, 0.0f, 1.0f)};
      })
      .combine([=](const State &a, const State &b) {
        const Expr m = max(a["m"], b["m"]);
        // The look-alike forgets to rescale the right operand's sum.
        const Expr l = a["l"] * rescale(a["m"], m) + (wrong_rescale ? b["l"] : b["l"] * rescale(b["m"], m));
        return std::vector<Expr>{m, l};
      })
      .build();
}

Monoid argmax_missing_tie_condition() {
  // Meant as "take b if it is larger, or equal with a smaller index", but the value comparison of the
  // tie was forgotten: b wins on a smaller index alone. Whether a wins now depends on the grouping.
  return MonoidBuilder("argmax_missing_tie_condition")
      .state({{"v", f64}, {"i", i32}})
      .identity({-INFINITY, Expr(INT32_MAX)})
      .combine([](const State &a, const State &b) {
        const Expr take_b = b["v"] > a["v"] || b["i"] < a["i"];
        return std::vector<Expr>{select(take_b, b["v"], a["v"]), select(take_b, b["i"], a["i"])};
      })
      .build();
}

enum class Base2Inverse { correct, forgets_rescale };

// Softmax in base 2 (scores pre-scaled by log2(e), as the kernels compute it) as a user's twist.
Monoid base2_softmax(Base2Inverse inverse, bool rule_is_left_max) {
  auto rescale = [](const Expr &m, const Expr &r) { return select(m == -INFINITY, 0, exp2(m - r)); };
  return TwistBuilder(fmt::format("base2_softmax{}{}",
                                  inverse == Base2Inverse::correct ? "" : "_inverse_forgets_rescale",
                                  rule_is_left_max ? "_left_reference" : ""),
                      product({max(f32), sum(f32)}, {"m", "l"}))
      .state({{"m", f32}, {"l", f32}})
      .elements({{"s", f32}})
      .identity({-INFINITY, 0.0})
      .lift([](const State &x) {
        return std::vector<Expr>{x[0], select(x[0] == -INFINITY, 0.0f, 1.0f)};
      })
      .reference(f32, [=](const State &a,
                          const State &b) { return rule_is_left_max ? a["m"] : max(a["m"], b["m"]); })
      .to_base([=](const State &s, const Expr &r) {
        return std::vector<Expr>{s["m"], s["l"] * rescale(s["m"], r)};
      })
      .from_base([=](const State &b, const Expr &r) {
        if (inverse == Base2Inverse::forgets_rescale) return std::vector<Expr>{b["m"], b["l"]};
        return std::vector<Expr>{b["m"], select(b["m"] == -INFINITY, 0, b["l"] * exp2(r - b["m"]))};
      })
      .build();
}

// A running mean as a twist over (+, +) whose psi^-1 divides the sum by 2 instead of by n: psi is then no
// bijection, the twist proves nothing, and the combine is not associative.
Monoid mean_with_wrong_inverse() {
  return TwistBuilder("mean_wrong_inverse", product({sum(f64), sum(f64)}, {"n", "sum"}))
      .state({{"n", f64}, {"mean", f64}})
      .elements({{"x", f64}})
      .identity({0.0, 0.0})
      .lift([](const State &x) {
        return std::vector<Expr>{Expr(1.0), x[0]};
      })
      .to_base([](const State &s, const Expr &) {
        return std::vector<Expr>{s["n"], s["n"] * s["mean"]};
      })
      .from_base([](const State &b, const Expr &) {
        return std::vector<Expr>{b["n"], select(b["n"] == 0, 0, b["sum"] / 2)};
      })
      .build();
}

// Re-evaluates both sides of a counterexample from its inputs, in extended and in double arithmetic.
std::pair<Evaluated, Evaluated> sides_of(const Monoid &m, const Counterexample &c) {
  auto side = [&](const MonoidEvaluator &ev, bool left) -> Values {
    const auto &s = c.states;
    switch (c.law) {
      case Law::associativity:
        return left ? ev.combine(ev.combine(s[0], s[1]), s[2]) : ev.combine(s[0], ev.combine(s[1], s[2]));
      case Law::left_identity:
        return left ? ev.combine(ev.identity(), s[0]) : s[0];
      case Law::right_identity:
        return left ? ev.combine(s[0], ev.identity()) : s[0];
      case Law::homomorphism: {
        std::span<const Values> x(c.elements);
        return left ? ev.fold(x) : ev.combine(ev.fold(x.first(c.split)), ev.fold(x.subspan(c.split)));
      }
      case Law::fold_directions: {
        if (left) return ev.fold(c.elements);
        Values r = ev.identity();
        for (auto it = c.elements.rbegin(); it != c.elements.rend(); ++it) r = ev.combine(ev.lift(*it), r);
        return r;
      }
      default:
        FAIL("a monoid law was expected, got ", law_statement(c.law));
        return {};
    }
  };
  const MonoidEvaluator ext(m, Arithmetic::extended), dbl(m, Arithmetic::exact);
  return {{side(ext, true), side(dbl, true)}, {side(ext, false), side(dbl, false)}};
}

std::vector<Monoid> non_associative_corpus() {
  auto binary = [](const std::string &name, double identity, const Combine &combine) {
    return scalar(name, identity, combine);
  };
  return {
      binary("minus", 0.0, [](const State &a, const State &b) { return std::vector<Expr>{a[0] - b[0]}; }),
      binary("average", 0.0,
             [](const State &a, const State &b) { return std::vector<Expr>{(a[0] + b[0]) / 2}; }),
      binary("square_plus", 0.0,
             [](const State &a, const State &b) { return std::vector<Expr>{a[0] * a[0] + b[0]}; }),
      binary("times_plus_one", 0.0,
             [](const State &a, const State &b) { return std::vector<Expr>{a[0] * b[0] + 1}; }),
      binary("abs_difference", 0.0,
             [](const State &a, const State &b) { return std::vector<Expr>{abs(a[0] - b[0])}; }),
      binary("power", 1.0, [](const State &a, const State &b) { return std::vector<Expr>{pow(a[0], b[0])}; }),
      binary("max_plus_one", -INFINITY,
             [](const State &a, const State &b) { return std::vector<Expr>{max(a[0], b[0] + 1)}; }),
      softmax_by_hand(true),
      welford_by_hand(true),
      argmax_missing_tie_condition(),
      max_plus_matrices(true),
      mean_with_wrong_inverse(),
      // Associative, and Halide proves it, but 1 is no identity of +: each tile of a split fold would add
      // it once more. (0 as the identity of max would pass: every state a fold from 0 reaches is >= 0,
      // where 0 is an identity.)
      binary("plus_with_identity_one", 1.0,
             [](const State &a, const State &b) { return std::vector<Expr>{a[0] + b[0]}; }),
  };
}

struct Associative {
  Monoid monoid;
  Level level;
};

}  // namespace

TEST_CASE("associative operations are accepted each at the level that should decide it") {
  const std::vector<Associative> corpus = {
      {sum(f32), Level::construction},
      {max(f64), Level::construction},
      {argmax(f32), Level::construction},
      {softmax(f32), Level::construction},
      {attention(f32, 3), Level::construction},
      {welford(f64), Level::construction},
      {log_sum_exp(f64), Level::construction},
      {affine(f64), Level::construction},
      {affine(f64, 2), Level::construction},
      {product({sum(f64), max(f64), argmin(f64)}), Level::construction},
      {twisted_softmax(f32), Level::construction},
      {twisted_welford(f64), Level::construction},
      {root_mean_square(), Level::construction},
      {base2_softmax(Base2Inverse::correct, false), Level::construction},
      {scalar("plus", 0.0, [](const State &a, const State &b) { return std::vector<Expr>{a[0] + b[0]}; }),
       Level::halide},
      {scalar("minimum", INFINITY,
              [](const State &a, const State &b) { return std::vector<Expr>{min(b[0], a[0])}; }),
       Level::halide},
      {complex_product(), Level::halide},
      {argmin_halide_style(), Level::halide},
      {plain_affine(), Level::smt},
      {max_plus_matrices(false), Level::tested},
      {single_component_log_sum_exp(), Level::tested},
      {welford_by_hand(false), Level::tested},
      {softmax_by_hand(false), Level::tested},
      // x + y + 1 is associative, with identity -1: (x + y + 1) + z + 1 == x + (y + z + 1) + 1.
      {scalar("plus_one", -1.0,
              [](const State &a, const State &b) { return std::vector<Expr>{a[0] + b[0] + 1}; }),
       Level::smt},
      // The twist does not prove it (its psi^-1 forgets to undo the rescale, so the transport depends on r),
      // but with r = max(a.m, b.m) the combine is the correct one, and testing accepts it.
      {base2_softmax(Base2Inverse::forgets_rescale, false), Level::tested},
  };
  for (const Associative &c : corpus) {
    CAPTURE(c.monoid.name);
    const Verdict v = check_associativity(c.monoid);
    INFO(v.to_string());
    CHECK(v.accepted);
    CHECK(v.level == c.level);
    CHECK(!v.counterexample);
  }
}

TEST_CASE(
    "non-associative look-alikes are refused with a counterexample that re-evaluates to two different "
    "sides") {
  const std::vector<Monoid> corpus = non_associative_corpus();
  for (const Monoid &m : corpus) {
    CAPTURE(m.name);
    const Verdict v = check_associativity(m);
    INFO(v.to_string());
    CHECK(!v.accepted);
    CHECK((v.level == Level::smt || v.level == Level::tested));
    REQUIRE(v.counterexample);
    const Counterexample &c = *v.counterexample;
    const auto [lhs, rhs] = sides_of(m, c);
    CHECK(lhs.extended == c.lhs);
    CHECK(rhs.extended == c.rhs);
    const int k = c.component;
    REQUIRE(k >= 0);
    REQUIRE(k < static_cast<int>(lhs.extended.size()));
    const Real difference = std::isinf(lhs.extended[k]) || std::isinf(rhs.extended[k])
                                ? std::numeric_limits<Real>::infinity()
                                : std::fabs(lhs.extended[k] - rhs.extended[k]);
    CHECK(difference > c.tolerance);
    // The double evaluation shows the same disagreement: it is not an artefact of one arithmetic.
    const Real double_difference = std::isinf(lhs.exact[k]) || std::isinf(rhs.exact[k])
                                       ? std::numeric_limits<Real>::infinity()
                                       : std::fabs(lhs.exact[k] - rhs.exact[k]);
    CHECK(double_difference > c.tolerance);
    CHECK(v.to_string().find("left side") != std::string::npos);
  }
}

TEST_CASE(
    "a combine whose folds from the identity all overflow is refused on lifts of single elements, where "
    "they do not") {
  // With the reference r = a.m the first combine computes exp2(s - -inf) = inf, so every state folded from
  // the identity has l = inf, and every law holds there as inf == inf, which says nothing. The lifts of
  // single elements are states too (a tree's leaves); there l is finite, and the combine is wrong.
  const Monoid m = base2_softmax(Base2Inverse::forgets_rescale, true);
  const Verdict v = check_associativity(m);
  INFO(v.to_string());
  CHECK(!v.accepted);
  REQUIRE(v.counterexample);
  for (const Values &state : v.counterexample->states)
    for (Real x : state) CHECK(std::isfinite(x));
}

TEST_CASE("the verdicts do not depend on the seed") {
  // Rounding alone must never refuse an associative combine, and no seed may let a look-alike through.
  const std::vector<Monoid> associative = {sum(f32),
                                           product(f64),
                                           max(f64),
                                           argmax(f32),
                                           argmin(f64),
                                           softmax(f32),
                                           log_sum_exp(f64),
                                           attention(f32, 3),
                                           welford(f64),
                                           welford(f32),
                                           affine(f64),
                                           affine(f32, 2),
                                           twisted_softmax(f64),
                                           twisted_welford(f64),
                                           twisted_attention(f32, 2)};
  const std::vector<Monoid> look_alikes = non_associative_corpus();
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    CAPTURE(seed);
    for (const Monoid &m : associative) {
      CAPTURE(m.name);
      const Verdict tested = check_associativity(m, CheckOptions{.seed = seed, .first_level = Level::tested});
      INFO(tested.to_string());
      CHECK(tested.accepted);
      if (m.twist) {
        const Verdict proved = check_associativity(m, CheckOptions{.seed = seed});
        INFO(proved.to_string());
        CHECK(proved.level == Level::construction);
      }
    }
    for (const Monoid &m : look_alikes) {
      CAPTURE(m.name);
      const Verdict v = check_associativity(m, CheckOptions{.seed = seed});
      INFO(v.to_string());
      CHECK(!v.accepted);
      CHECK(v.counterexample.has_value());
    }
  }
}

TEST_SUITE_END();
