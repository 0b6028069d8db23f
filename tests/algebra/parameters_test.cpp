// Monoids that read run-time Params: proved by Z3 for every value where it can, checked at sampled values
// otherwise, refused with a counterexample that names the Params' values, and held to declared domains.
#include <doctest/doctest.h>

#include <cmath>

#include "algebra/builtins.h"
#include "algebra/check.h"
#include "algebra/parameters.h"
#include "algebra/twist.h"
#include "lang/twist.h"
#include "tests/error_capture.h"

using namespace twist;
using namespace twist::algebra;
using twist::testing::contains;
using twist::testing::error_of;

TEST_SUITE_BEGIN("algebra");

namespace {

// Softmax at a temperature: a twist over (max, +) whose psi scales l by exp((m - r) / T).
Monoid tempered_softmax(const Expr &temperature, std::optional<Domain> domain) {
  auto rescale = [=](const Expr &m, const Expr &r) {
    return select(m == -INFINITY, 0.0f, exp((m - r) / temperature));
  };
  TwistBuilder b("tempered_softmax", product({max(f32), sum(f32)}, {"m", "l"}));
  b.state({{"m", f32}, {"l", f32}})
      .elements({{"s", f32}})
      .identity({-INFINITY, 0.0})
      .lift([](const State &x) {
        return std::vector<Expr>{x[0], select(x[0] == -INFINITY, 0.0f, 1.0f)};
      })
      .reference(f32, [](const State &a, const State &b) { return max(a["m"], b["m"]); })
      .to_base([=](const State &s, const Expr &r) {
        return std::vector<Expr>{s["m"], s["l"] * rescale(s["m"], r)};
      })
      .from_base([=](const State &s, const Expr &r) {
        return std::vector<Expr>{s["m"],
                                 select(s["m"] == -INFINITY, 0.0f, s["l"] * exp((r - s["m"]) / temperature))};
      });
  if (domain) b.domain("temperature", *domain);
  return b.build();
}

Monoid with_coefficient(const std::string &name,
                        const std::function<Expr(const Expr &, const Expr &, const Expr &)> &op,
                        std::optional<Domain> domain = {}) {
  const Param<double> k("k");
  MonoidBuilder b(name);
  b.state({{"x", f64}}).identity({0.0}).combine([=](const State &a, const State &c) {
    return std::vector<Expr>{op(a[0], c[0], k)};
  });
  if (domain) b.domain("k", *domain);
  return b.build();
}

}  // namespace

TEST_CASE("a monoid lists the Params it reads, and a domain may restrict them") {
  const Param<float> temperature("temperature");
  const Monoid m = tempered_softmax(temperature, Domain{.lo = 0.25, .hi = 4});
  REQUIRE(m.parameters().size() == 1);
  CHECK(m.parameters()[0].name == "temperature");
  CHECK(m.parameters()[0].type == f32);
  CHECK(m.parameter_domains.at("temperature").hi == 4);
  const Monoid at_half = with_parameter_values(m, {{"temperature", 0.5}});
  CHECK(at_half.parameters().empty());
  CHECK(contains(error_of([] {
                   MonoidBuilder("no_such")
                       .state({{"x", f64}})
                       .identity({0.0})
                       .combine([](const State &a, const State &b) { return std::vector<Expr>{a[0] + b[0]}; })
                       .domain("temperature", Domain{.lo = 0, .hi = std::nullopt})
                       .build();
                 }),
                 "neither one of its element components nor a Param"));
}

TEST_CASE("a twisted softmax at a Param temperature is accepted at every sampled temperature") {
  const Param<float> temperature("temperature");
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    CAPTURE(seed);
    const Verdict v =
        check_associativity(tempered_softmax(temperature, Domain{.lo = 0.25, .hi = 4}), {.seed = seed});
    INFO(v.to_string());
    CHECK(v.accepted);
    CHECK(v.level == Level::construction);
    CHECK(contains(v.to_string(), "reads the Params temperature (f32)"));
    CHECK(contains(v.to_string(), "temperature in [0.25, 4]"));
  }
}

TEST_CASE("Z3 proves a combine with a Param coefficient for every value of it") {
  // a + b + k a b is associative whatever k is: both groupings give a + b + c + k(ab + ac + bc) + k^2 abc.
  const Monoid m = with_coefficient(
      "plus_k_times", [](const Expr &a, const Expr &b, const Expr &k) { return a + b + k * a * b; });
  const Verdict v = check_associativity(m);
  INFO(v.to_string());
  CHECK(v.accepted);
  CHECK(v.level == Level::smt);
  CHECK(contains(v.to_string(), "every value of its Params"));
}

TEST_CASE(
    "a combine wrong for some values of a Param is refused with them, unless its domain excludes them") {
  auto op = [](const Expr &a, const Expr &b, const Expr &k) { return select(k > 2.0, a - b, a + b); };
  const Monoid anywhere = with_coefficient("minus_past_2", op);
  const Verdict v = check_associativity(anywhere);
  INFO(v.to_string());
  CHECK(!v.accepted);
  REQUIRE(v.counterexample);
  REQUIRE(v.counterexample->parameters.size() == 1);
  const double k = static_cast<double>(v.counterexample->parameters[0].second);
  CHECK(k > 2);
  CHECK(contains(v.to_string(), "Param k = "));
  // The counterexample re-evaluates at the Param's value.
  const Counterexample &c = *v.counterexample;
  const MonoidEvaluator ev(with_parameter_values(anywhere, {{"k", k}}), Arithmetic::exact);
  if (c.law == Law::associativity) {
    const Values l = ev.combine(ev.combine(c.states[0], c.states[1]), c.states[2]),
                 r = ev.combine(c.states[0], ev.combine(c.states[1], c.states[2]));
    CHECK(std::fabs(static_cast<double>(l[0] - r[0])) > c.tolerance);
  }
  const Verdict bounded = check_associativity(with_coefficient("minus_past_2", op, Domain{.lo = 0, .hi = 1}));
  INFO(bounded.to_string());
  CHECK(bounded.accepted);
  CHECK(contains(bounded.to_string(), "k in [0, 1]"));
}

TEST_CASE("a wrong combine with a Param and a math function is refused, naming the Param's value") {
  // exp is beyond the SMT encoding; the failure is found at a sampled k.
  const Monoid m = with_coefficient("exp_mix", [](const Expr &a, const Expr &b, const Expr &k) {
    return a + b + k * exp(a * 0.0) * a * b * b;
  });
  const Verdict v = check_associativity(m);
  INFO(v.to_string());
  CHECK(!v.accepted);
  REQUIRE(v.counterexample);
  CHECK(!v.counterexample->parameters.empty());
}

TEST_SUITE_END();
