// The checker against operations written to get past it: combines that are wrong only at large
// magnitudes, only once a state's count passes what short lists reach, only for an identity that is not
// neutral for single elements, only where the user's own step and the combine part ways, only with a NaN
// or an integer overflow; each must be refused with a counterexample that re-evaluates here. Beside them,
// associative operations (with declared element domains, integers proved bit-exactly, user steps that
// the combine reproduces) that no seed may refuse. Combines over i8 and u8 are checked against
// enumeration of all triples. The time to check each monoid is printed.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "algebra/builtins.h"
#include "algebra/check.h"
#include "algebra/online.h"
#include "algebra/tolerance.h"
#include "algebra/twist.h"
#include "test_support.h"

using namespace twist;
using namespace twist::algebra;

TEST_SUITE_BEGIN("algebra");

namespace {

using Combine = MonoidBuilder::Fn2;

const Type i8 = Halide::Int(8), u8 = Halide::UInt(8);

Monoid scalar(const std::string &name, const Type &t, Expr identity, const Combine &combine) {
  return MonoidBuilder(name).state({{"x", t}}).identity({identity}).combine(combine).build();
}

Monoid f64_op(const std::string &name, double identity, const Combine &combine) {
  return scalar(name, f64, identity, combine);
}

Monoid i32_op(const std::string &name, int identity, const Combine &combine) {
  return scalar(name, i32, identity, combine);
}

// An i32 state holding an i8 or u8 value: the combine computes in the narrow type, and the elements'
// domain is the narrow type's range, so every reachable state is one of its 256 values.
Monoid narrow_op(const std::string &name, const Type &narrow, int identity,
                 const std::function<Expr(const Expr &, const Expr &)> &op) {
  const double lo = narrow.is_int() ? -128 : 0, hi = narrow.is_int() ? 127 : 255;
  return MonoidBuilder(name)
      .state({{"x", i32}})
      .identity({identity})
      .combine([=](const State &a, const State &b) {
        return std::vector<Expr>{cast(i32, op(cast(narrow, a[0]), cast(narrow, b[0])))};
      })
      .domain("x", Domain{.lo = lo, .hi = hi, .integral = true})
      .build();
}

// (n, sum): the count as i32, the sum as f64.
Monoid counted_sum(const std::string &name, const std::function<Expr(const State &, const State &)> &sum) {
  return MonoidBuilder(name)
      .state({{"n", i32}, {"sum", f64}})
      .elements({{"x", f64}})
      .identity({Expr(0), 0.0})
      .lift([](const State &x) {
        return std::vector<Expr>{Expr(1), x[0]};
      })
      .combine([=](const State &a, const State &b) {
        return std::vector<Expr>{a["n"] + b["n"], sum(a, b)};
      })
      .build();
}

Monoid softmax_without_mask_guard() {
  // The classic bug: exp(a.m - m) without the guard for m == -inf, which is NaN once both maxima are -inf.
  return MonoidBuilder("softmax_without_mask_guard")
      .state({{"m", f32}, {"l", f32}})
      .elements({{"s", f32}})
      .identity({-INFINITY, 0.0})
      .lift([](const State &x) {
        return std::vector<Expr>{x[0], select(x[0] == -INFINITY, 0.0f, 1.0f)};
      })
      .combine([](const State &a, const State &b) {
        const Expr m = max(a["m"], b["m"]);
        return std::vector<Expr>{m, a["l"] * exp(a["m"] - m) + b["l"] * exp(b["m"] - m)};
      })
      .build();
}

Monoid log_sum_exp_without_guard() {
  return f64_op("log_sum_exp_without_guard", -INFINITY, [](const State &a, const State &b) {
    const Expr hi = max(a[0], b[0]);
    return std::vector<Expr>{hi + log(exp(a[0] - hi) + exp(b[0] - hi))};
  });
}

// (w, mean) of weighted elements: correct for positive weights; a zero or negative total weight breaks it.
Monoid weighted_mean(bool positive_domain) {
  MonoidBuilder b(positive_domain ? "weighted_mean_positive_weights" : "weighted_mean_any_weights");
  b.state({{"w", f64}, {"mean", f64}})
      .elements({{"w", f64}, {"x", f64}})
      .identity({0.0, 0.0})
      .lift([](const State &x) {
        return std::vector<Expr>{x["w"], x["x"]};
      })
      .combine([](const State &a, const State &b) {
        const Expr w = a["w"] + b["w"];
        return std::vector<Expr>{
            w, select(w == 0, a["mean"] + b["mean"], (a["w"] * a["mean"] + b["w"] * b["mean"]) / w)};
      });
  if (positive_domain) b.domain("w", Domain{.lo = 1.0 / 1024, .hi = 1024});
  return b.build();
}

// An argmax as (v, i) whose combine keeps the left operand on ties (the earlier index). Its identity
// (-inf, -1) is neutral only for finite values (the lift of (-inf, 3) would lose its index), which the
// domain of v says.
Monoid argmax_with_step(bool step_takes_later_tie) {
  return MonoidBuilder(step_takes_later_tie ? "argmax_step_prefers_later_tie" : "argmax_with_matching_step")
      .state({{"v", f64}, {"i", i32}})
      .domain("v",
              Domain{.lo = -std::numeric_limits<double>::max(), .hi = std::numeric_limits<double>::max()})
      .identity({-INFINITY, Expr(-1)})
      .combine([](const State &a, const State &b) {
        const Expr take_b = b["v"] > a["v"];
        return std::vector<Expr>{select(take_b, b["v"], a["v"]), select(take_b, b["i"], a["i"])};
      })
      .step([=](const State &s, const State &x) {
        const Expr take_x = step_takes_later_tie ? x["v"] >= s["v"] : x["v"] > s["v"];
        return std::vector<Expr>{select(take_x, x["v"], s["v"]), select(take_x, x["i"], s["i"])};
      })
      .build();
}

Monoid sum_with_step(bool decays) {
  return MonoidBuilder(decays ? "sum_with_decaying_step" : "sum_with_matching_step")
      .state({{"x", f64}})
      .identity({0.0})
      .combine([](const State &a, const State &b) { return std::vector<Expr>{a[0] + b[0]}; })
      .step([=](const State &s, const State &x) {
        return std::vector<Expr>{decays ? s[0] * 0.5 + x[0] : s[0] + x[0]};
      })
      .build();
}

// The i32 sum saturated at the type's limits, computed without overflow checks in a wider type.
Expr saturating_add(const Expr &a, const Expr &b) {
  const Expr s = a + b;  // wraps
  return select(a > 0 && b > 0 && s < 0, Expr(INT32_MAX),
                select(a < 0 && b < 0 && s >= 0, Expr(INT32_MIN), s));
}

std::vector<Monoid> adversarial() {
  return {
      // Wrong only at large magnitudes.
      f64_op("plus_clamped_at_1e6", 0.0,
             [](const State &a, const State &b) { return std::vector<Expr>{min(a[0] + b[0], 1e6)}; }),
      f64_op("plus_dropping_huge_right_operand", 0.0,
             [](const State &a, const State &b) {
               return std::vector<Expr>{select(abs(b[0]) > 1e12, a[0], a[0] + b[0])};
             }),
      f64_op("product_clamped_at_f32_max", 1.0,
             [](const State &a, const State &b) { return std::vector<Expr>{min(a[0] * b[0], 3.4e38)}; }),
      f64_op("plus_flushing_huge_to_inf", 0.0,
             [](const State &a, const State &b) {
               const Expr s = a[0] + b[0];
               return std::vector<Expr>{select(abs(s) > 1e300, INFINITY, s)};
             }),
      // Wrong only once a state's count passes what short lists reach.
      counted_sum("sum_corrected_past_1000",
                  [](const State &a, const State &b) {
                    return select(a["n"] + b["n"] > 1000, a["sum"] + b["sum"] + 1, a["sum"] + b["sum"]);
                  }),
      counted_sum(
          "sum_dropping_right_past_300",
          [](const State &a, const State &b) { return select(a["n"] > 300, a["sum"], a["sum"] + b["sum"]); }),
      // Identities that are not neutral for single elements, or off by one.
      f64_op("max_with_identity_zero", 0.0,
             [](const State &a, const State &b) { return std::vector<Expr>{max(a[0], b[0])}; }),
      f64_op("min_with_identity_1e30", 1e30,
             [](const State &a, const State &b) { return std::vector<Expr>{min(a[0], b[0])}; }),
      f64_op("clamped_max", -1.0,
             [](const State &a, const State &b) { return std::vector<Expr>{max(max(a[0], b[0]), -1.0)}; }),
      f64_op("max_with_identity_minus_1e30", -1e30,
             [](const State &a, const State &b) { return std::vector<Expr>{max(a[0], b[0])}; }),
      i32_op("i32_plus_with_identity_one", 1,
             [](const State &a, const State &b) { return std::vector<Expr>{a[0] + b[0]}; }),
      i32_op("i32_min_with_identity_max_minus_one", INT32_MAX - 1,
             [](const State &a, const State &b) { return std::vector<Expr>{min(a[0], b[0])}; }),
      i32_op("i32_or_masked_to_a_byte", 0,
             [](const State &a, const State &b) { return std::vector<Expr>{(a[0] | b[0]) & 255}; }),
      // NaN where a guard is missing.
      softmax_without_mask_guard(),
      log_sum_exp_without_guard(),
      // Integer overflow.
      i32_op("i32_saturating_plus", 0,
             [](const State &a, const State &b) { return std::vector<Expr>{saturating_add(a[0], b[0])}; }),
      i32_op("i32_plus_falling_back_to_max_on_overflow", 0,
             [](const State &a, const State &b) {
               const Expr s = a[0] + b[0];
               const Expr overflow = (a[0] > 0 && b[0] > 0 && s < 0) || (a[0] < 0 && b[0] < 0 && s >= 0);
               return std::vector<Expr>{select(overflow, max(a[0], b[0]), s)};
             }),
      i32_op("i32_average_by_shift", 0,
             [](const State &a, const State &b) { return std::vector<Expr>{(a[0] + b[0]) >> 1}; }),
      // The user's own step, which the combine does not reproduce.
      sum_with_step(true),
      argmax_with_step(true),
      // Weights the data never has make it fail; without a declared domain it is refused.
      weighted_mean(false),
      // Narrow integers.
      narrow_op("i8_saturating_plus", i8, 0,
                [](const Expr &a, const Expr &b) {
                  return cast(i8, clamp(cast(i32, a) + cast(i32, b), Expr(-128), Expr(127)));
                }),
      narrow_op("u8_average", u8, 0,
                [](const Expr &a, const Expr &b) { return cast(u8, (cast(i32, a) + cast(i32, b)) / 2); }),
      narrow_op("u8_min_with_identity_254", u8, 254, [](const Expr &a, const Expr &b) { return min(a, b); }),
  };
}

std::vector<Monoid> associative() {
  return {
      sum(f32),
      sum(f64),
      product(f64),
      max(f64),
      argmax(f32),
      argmin(f64),
      softmax(f32),
      log_sum_exp(f64),
      attention(f32, 2),
      welford(f64),
      affine(f64),
      twisted_softmax(f64),
      twisted_welford(f64),
      f64_op("plus_by_hand", 0.0,
             [](const State &a, const State &b) { return std::vector<Expr>{b[0] + a[0]}; }),
      f64_op("plus_one", -1.0,
             [](const State &a, const State &b) { return std::vector<Expr>{a[0] + b[0] + 1}; }),
      f64_op(
          "max_by_select", -INFINITY,
          [](const State &a, const State &b) { return std::vector<Expr>{select(a[0] < b[0], b[0], a[0])}; }),
      i32_op("i32_plus", 0, [](const State &a, const State &b) { return std::vector<Expr>{a[0] + b[0]}; }),
      i32_op("i32_times_plus_both", 0,
             [](const State &a, const State &b) {
               // (a + 1)(b + 1) - 1, associative with identity 0 in wrapping arithmetic.
               return std::vector<Expr>{a[0] * b[0] + a[0] + b[0]};
             }),
      i32_op("i32_xor", 0, [](const State &a, const State &b) { return std::vector<Expr>{a[0] ^ b[0]}; }),
      i32_op("i32_and", -1, [](const State &a, const State &b) { return std::vector<Expr>{a[0] & b[0]}; }),
      i32_op("i32_or_through_let", 0,
             [](const State &a, const State &b) {
               const Expr both = Halide::Internal::Variable::make(i32, "both");
               return std::vector<Expr>{Halide::Internal::Let::make("both", a[0] | b[0], both)};
             }),
      i32_op("i32_min", INT32_MAX,
             [](const State &a, const State &b) { return std::vector<Expr>{min(b[0], a[0])}; }),
      i32_op("i32_max_of_shifted_sign", INT32_MIN,
             [](const State &a, const State &b) { return std::vector<Expr>{max(a[0], b[0])}; }),
      counted_sum("counted_sum", [](const State &a, const State &b) { return a["sum"] + b["sum"]; }),
      weighted_mean(true),
      sum_with_step(false),
      argmax_with_step(false),
      narrow_op("i8_wrapping_plus", i8, 0, [](const Expr &a, const Expr &b) { return a + b; }),
      narrow_op("u8_max", u8, 0, [](const Expr &a, const Expr &b) { return max(a, b); }),
  };
}

struct Timed {
  Verdict verdict;
  double seconds;
};

Timed timed_check(const Monoid &m, const CheckOptions &options = {}) {
  const auto start = std::chrono::steady_clock::now();
  Verdict v = check_associativity(m, options);
  return {std::move(v), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

// Both sides of a monoid law's counterexample, re-evaluated from its inputs.
std::pair<Values, Values> sides_of(const Monoid &m, const Counterexample &c, Arithmetic arithmetic) {
  const MonoidEvaluator ev(m, arithmetic);
  const auto &s = c.states;
  std::span<const Values> x(c.elements);
  auto rightward = [&](bool by_step) {
    Values r = ev.identity();
    for (auto it = c.elements.rbegin(); it != c.elements.rend(); ++it)
      r = ev.combine(by_step ? ev.step(ev.identity(), *it) : ev.lift(*it), r);
    return r;
  };
  switch (c.law) {
    case Law::associativity:
      return {ev.combine(ev.combine(s[0], s[1]), s[2]), ev.combine(s[0], ev.combine(s[1], s[2]))};
    case Law::left_identity:
      return {ev.combine(ev.identity(), s[0]), s[0]};
    case Law::right_identity:
      return {ev.combine(s[0], ev.identity()), s[0]};
    case Law::homomorphism:
      return {ev.fold(x), ev.combine(ev.fold(x.first(c.split)), ev.fold(x.subspan(c.split)))};
    case Law::fold_directions:
      return {ev.fold(x), rightward(false)};
    case Law::user_homomorphism:
      return {ev.step_fold(x), ev.combine(ev.step_fold(x.first(c.split)), ev.step_fold(x.subspan(c.split)))};
    case Law::user_fold_directions:
      return {ev.step_fold(x), rightward(true)};
    default:
      FAIL("a monoid law was expected, got ", law_statement(c.law));
      return {};
  }
}

// The two sides differ beyond the counterexample's tolerance in extended and in double arithmetic (NaN
// against a number counts as different).
bool differs(const Monoid &m, const Counterexample &c) {
  const auto [le, re] = sides_of(m, c, Arithmetic::extended);
  const auto [ld, rd] = sides_of(m, c, Arithmetic::exact);
  auto apart = [&](Real x, Real y) {
    if (std::isnan(x) || std::isnan(y)) return std::isnan(x) != std::isnan(y);
    if (std::isinf(x) || std::isinf(y)) return x != y;
    return std::fabs(x - y) > c.tolerance;
  };
  const auto k = static_cast<size_t>(c.component);
  return k < le.size() && apart(le[k], re[k]) && apart(ld[k], rd[k]);
}

void print_times(const char *what, std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  double total = 0;
  for (double s : seconds) total += s;
  std::printf("%s: %zu checks in %.2f s, median %.1f ms, max %.1f ms\n", what, seconds.size(), total,
              1e3 * seconds[seconds.size() / 2], 1e3 * seconds.back());
}

}  // namespace

TEST_CASE("the adversarial corpus: every look-alike is refused with a counterexample that re-evaluates") {
  const std::vector<Monoid> corpus = adversarial();
  const size_t total = corpus.size() + associative().size();
  std::printf("adversarial corpus: %zu non-associative of %zu operations\n", corpus.size(), total);
  CHECK(corpus.size() >= 20);
  CHECK(total >= 50);
  std::vector<double> seconds;
  for (const Monoid &m : corpus) {
    CAPTURE(m.name);
    const Timed t = timed_check(m);
    const Verdict &v = t.verdict;
    seconds.push_back(t.seconds);
    std::printf("  %-44s refused  %-52s %7.1f ms  (%s)\n", m.name.c_str(), level_name(v.level).c_str(),
                1e3 * t.seconds,
                v.counterexample ? law_statement(v.counterexample->law).substr(0, 40).c_str() : "none");
    INFO(v.to_string());
    CHECK(!v.accepted);
    REQUIRE(v.counterexample);
    CHECK(differs(m, *v.counterexample));
  }
  print_times("non-associative", seconds);
}

TEST_CASE("the adversarial corpus: no associative operation is refused over 20 seeds") {
  std::vector<double> seconds;
  for (const Monoid &m : associative()) {
    CAPTURE(m.name);
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      CAPTURE(seed);
      const Timed t = timed_check(m, CheckOptions{.seed = seed});
      seconds.push_back(t.seconds);
      if (seed == 1)
        std::printf("  %-44s %-8s %-52s %7.1f ms\n", m.name.c_str(),
                    t.verdict.accepted ? "accepted" : "REFUSED", level_name(t.verdict.level).c_str(),
                    1e3 * t.seconds);
      INFO(t.verdict.to_string());
      CHECK(t.verdict.accepted);
    }
  }
  print_times("associative, 20 seeds", seconds);
}

TEST_CASE("integer bitwise and min/max combines are proved exactly, not only tested") {
  const std::vector<Monoid> proved = {
      i32_op("i32_xor", 0, [](const State &a, const State &b) { return std::vector<Expr>{a[0] ^ b[0]}; }),
      i32_op("i32_and", -1, [](const State &a, const State &b) { return std::vector<Expr>{a[0] & b[0]}; }),
      i32_op("i32_or", 0, [](const State &a, const State &b) { return std::vector<Expr>{a[0] | b[0]}; }),
      i32_op("i32_max", INT32_MIN,
             [](const State &a, const State &b) { return std::vector<Expr>{max(a[0], b[0])}; }),
      i32_op("i32_min", INT32_MAX,
             [](const State &a, const State &b) { return std::vector<Expr>{min(a[0], b[0])}; }),
  };
  for (const Monoid &m : proved) {
    CAPTURE(m.name);
    const Verdict v = check_associativity(m);
    INFO(v.to_string());
    CHECK(v.accepted);
    CHECK(v.level <= Level::smt);
  }
  // The same xor with an identity off by one is refused by Z3 with a confirmed counterexample.
  const Monoid off = i32_op("i32_xor_with_identity_one", 1,
                            [](const State &a, const State &b) { return std::vector<Expr>{a[0] ^ b[0]}; });
  const Verdict v = check_associativity(off);
  INFO(v.to_string());
  CHECK(!v.accepted);
  REQUIRE(v.counterexample);
  CHECK(differs(off, *v.counterexample));
}

TEST_CASE("a verdict that counts inconclusive instances says what an inconclusive instance is") {
  // Infinities on both sides (a max's -inf identity, overflows at the extremes) make instances
  // inconclusive; every verdict that reports some must explain them.
  int explained = 0;
  for (const Monoid &m : associative()) {
    const Verdict v = check_associativity(m, CheckOptions{.first_level = Level::tested});
    const std::string text = v.to_string();
    bool counted = false;
    for (const std::string &note : v.notes) {
      const size_t at = note.find(" inconclusive");
      const size_t comma = note.rfind(", ", at);
      counted |= at != std::string::npos && comma != std::string::npos &&
                 note.substr(comma + 2, at - comma - 2) != "0";
    }
    if (!counted) continue;
    CAPTURE(m.name);
    CHECK(text.find("an instance is inconclusive where") != std::string::npos);
    ++explained;
  }
  CHECK(explained > 0);
}

TEST_CASE("a declared element domain is printed with the verdict and decides a weighted mean") {
  const Verdict narrow = check_associativity(weighted_mean(true));
  INFO(narrow.to_string());
  CHECK(narrow.accepted);
  CHECK(narrow.to_string().find("w in [0.0009765625, 1024]") != std::string::npos);
  const Verdict any = check_associativity(weighted_mean(false));
  CHECK(!any.accepted);
}

TEST_CASE("the verdict does not depend on how a constant is spelled") {
  // Softmax at temperature 0.7 as a twist over (max, +): psi scales l by exp((m - r) / 0.7). Dividing by
  // 0.7f and multiplying by 1.4285714f are the same rescale up to the rounding of the constant; the
  // simplifier folds the two transported combines differently, and the verdict must not care.
  auto tempered_softmax = [](const std::string &name, bool divide) {
    auto scaled = [=](const Expr &d) { return divide ? d / 0.7f : d * 1.4285714f; };
    auto rescale = [=](const Expr &m, const Expr &r) {
      return select(m == -INFINITY, 0.0f, exp(scaled(m - r)));
    };
    return TwistBuilder(name, product({max(f32), sum(f32)}, {"m", "l"}))
        .state({{"m", f32}, {"l", f32}})
        .elements({{"s", f32}})
        .identity({-INFINITY, 0.0})
        .lift([](const State &x) {
          return std::vector<Expr>{x[0], select(x[0] == -INFINITY, 0.0f, 1.0f)};
        })
        .reference(f32, [](const State &a, const State &b) { return max(a["m"], b["m"]); })
        .to_base([=](const State &st, const Expr &r) {
          return std::vector<Expr>{st["m"], st["l"] * rescale(st["m"], r)};
        })
        .from_base([=](const State &b, const Expr &r) {
          return std::vector<Expr>{b["m"],
                                   select(b["m"] == -INFINITY, 0.0f, b["l"] * exp(scaled(r - b["m"])))};
        })
        .build();
  };
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    CAPTURE(seed);
    const Verdict divided = check_associativity(tempered_softmax("softmax_over_0_7", true), {.seed = seed});
    const Verdict multiplied =
        check_associativity(tempered_softmax("softmax_times_1_4285714", false), {.seed = seed});
    INFO(divided.to_string());
    INFO(multiplied.to_string());
    CHECK(divided.accepted);
    CHECK(multiplied.accepted);
    CHECK(divided.level == multiplied.level);
  }
}

TEST_CASE("the checker agrees with enumeration of all triples for combines over i8 and u8") {
  struct Narrow {
    Monoid monoid;
    std::function<int(int, int)> op;  // the same combine on the narrow values, in plain C++
    int lo, hi, identity;
  };
  auto wrap8 = [](int v, bool is_signed) {
    const int u = v & 255;
    return is_signed && u > 127 ? u - 256 : u;
  };
  const std::vector<Narrow> cases = {
      {narrow_op("i8_wrapping_plus", i8, 0, [](const Expr &a, const Expr &b) { return a + b; }),
       [&](int a, int b) { return wrap8(a + b, true); }, -128, 127, 0},
      {narrow_op("i8_saturating_plus", i8, 0,
                 [](const Expr &a, const Expr &b) {
                   return cast(i8, clamp(cast(i32, a) + cast(i32, b), Expr(-128), Expr(127)));
                 }),
       [](int a, int b) { return std::clamp(a + b, -128, 127); }, -128, 127, 0},
      {narrow_op("i8_minus", i8, 0, [](const Expr &a, const Expr &b) { return a - b; }),
       [&](int a, int b) { return wrap8(a - b, true); }, -128, 127, 0},
      {narrow_op("i8_max_with_identity_minus_127", i8, -127,
                 [](const Expr &a, const Expr &b) { return max(a, b); }),
       [](int a, int b) { return std::max(a, b); }, -128, 127, -127},
      {narrow_op("u8_wrapping_times", u8, 1, [](const Expr &a, const Expr &b) { return a * b; }),
       [&](int a, int b) { return wrap8(a * b, false); }, 0, 255, 1},
      {narrow_op("u8_max", u8, 0, [](const Expr &a, const Expr &b) { return max(a, b); }),
       [](int a, int b) { return std::max(a, b); }, 0, 255, 0},
      {narrow_op("u8_xor", u8, 0, [](const Expr &a, const Expr &b) { return a ^ b; }),
       [](int a, int b) { return a ^ b; }, 0, 255, 0},
      {narrow_op("u8_average", u8, 0,
                 [](const Expr &a, const Expr &b) { return cast(u8, (cast(i32, a) + cast(i32, b)) / 2); }),
       [](int a, int b) { return (a + b) / 2; }, 0, 255, 0},
      {narrow_op("u8_min_with_identity_254", u8, 254, [](const Expr &a, const Expr &b) { return min(a, b); }),
       [](int a, int b) { return std::min(a, b); }, 0, 255, 254},
      {narrow_op("u8_shift_or", u8, 0, [](const Expr &a, const Expr &b) { return (a << 1) | b; }),
       [&](int a, int b) { return wrap8((a << 1) | b, false); }, 0, 255, 0},
  };
  for (const Narrow &c : cases) {
    CAPTURE(c.monoid.name);
    bool lawful = true;
    for (int a = c.lo; a <= c.hi && lawful; ++a) {
      lawful = c.op(c.identity, a) == a && c.op(a, c.identity) == a;
      for (int b = c.lo; b <= c.hi && lawful; ++b) {
        const int ab = c.op(a, b);
        for (int x = c.lo; x <= c.hi; ++x)
          if (c.op(ab, x) != c.op(a, c.op(b, x))) {
            lawful = false;
            break;
          }
      }
    }
    const Verdict v = check_associativity(c.monoid);
    std::printf("  %-36s enumeration: %-16s checker: %s (%s)\n", c.monoid.name.c_str(),
                lawful ? "a monoid" : "not a monoid", v.accepted ? "accepted" : "refused",
                level_name(v.level).c_str());
    INFO(v.to_string());
    CHECK(v.accepted == lawful);
    if (!lawful) {
      REQUIRE(v.counterexample);
      CHECK(differs(c.monoid, *v.counterexample));
    }
  }
}

TEST_SUITE_END();
