// The commutativity query: a . b == b . a decided by the levels that apply (construction, Z3, testing),
// refused with a counterexample that re-evaluates, and required by require_reorderable.
#include <doctest/doctest.h>

#include <cmath>

#include "algebra/builtins.h"
#include "algebra/legality.h"
#include "algebra/online.h"
#include "tests/algebra/test_support.h"
#include "tests/error_capture.h"

using namespace twist;
using namespace twist::algebra;
using twist::algebra::testing::affine_by_hand;
using twist::testing::contains;
using twist::testing::error_of;

TEST_SUITE_BEGIN("algebra");

namespace {

using Combine = MonoidBuilder::Fn2;

Monoid scalar(const std::string &name, const Type &t, Expr identity, const Combine &combine) {
  return MonoidBuilder(name).state({{"x", t}}).identity({identity}).combine(combine).build();
}

// The two sides of a commutativity counterexample, re-evaluated in double.
bool sides_differ(const Monoid &m, const Counterexample &c) {
  REQUIRE(c.law == Law::commutativity);
  REQUIRE(c.states.size() == 2);
  const MonoidEvaluator ev(m, Arithmetic::exact);
  const Values ab = ev.combine(c.states[0], c.states[1]), ba = ev.combine(c.states[1], c.states[0]);
  for (size_t k = 0; k < ab.size(); ++k)
    if (std::fabs(static_cast<double>(ab[k] - ba[k])) > c.tolerance) return true;
  return false;
}

}  // namespace

TEST_CASE(
    "commutativity is proved by construction for the library's commutative monoids, products and twists") {
  for (const Monoid &m : {sum(f32), max(f64), welford(f64), softmax(f32), twisted_softmax(f64),
                          product({sum(f64), max(f64)}, {"s", "m"})}) {
    CAPTURE(m.name);
    const Verdict v = check_commutativity(m);
    INFO(v.to_string());
    CHECK(v.accepted);
    CHECK(v.level == Level::construction);
    CHECK(contains(v.to_string(), "commutative"));
  }
}

TEST_CASE("a user's commutative combine is proved by Z3, bit-exactly or over the reals") {
  const Monoid xor_ = scalar("i32_xor", i32, 0,
                             [](const State &a, const State &b) { return std::vector<Expr>{a[0] ^ b[0]}; });
  const Monoid plus = scalar("plus_reversed", f64, 0.0,
                             [](const State &a, const State &b) { return std::vector<Expr>{b[0] + a[0]}; });
  for (const Monoid &m : {xor_, plus}) {
    const Verdict v = check_commutativity(m);
    INFO(v.to_string());
    CHECK(v.accepted);
    CHECK(v.level == Level::smt);
  }
}

TEST_CASE("a combine that does not commute is refused with a counterexample that re-evaluates") {
  const Monoid first_set = scalar("first_nonzero", i32, 0, [](const State &a, const State &b) {
    return std::vector<Expr>{select(a[0] != 0, a[0], b[0])};  // associative, not commutative
  });
  for (const Monoid &m : {affine(f64), affine_by_hand(false), first_set}) {
    CAPTURE(m.name);
    CHECK(check_associativity(m).accepted);
    const Verdict v = check_commutativity(m);
    INFO(v.to_string());
    CHECK(!v.accepted);
    CHECK(contains(v.to_string(), "NOT accepted as commutative"));
    REQUIRE(v.counterexample);
    CHECK(sides_differ(m, *v.counterexample));
  }
}

TEST_CASE("require_reorderable needs commutativity besides associativity, and says what to do") {
  const ReassociationApproval approved = require_reorderable(sum(f32), "reorder of the reduction loops of C");
  CHECK(approved.verdict.accepted);
  CHECK(contains(approved.to_string(), "associative and commutative"));
  const std::string error =
      error_of([] { require_reorderable(affine_by_hand(true), "reorder of the loops of f"); });
  CHECK(contains(error, "reorder of the loops of f"));
  CHECK(contains(error, "commutativity: a . b == b . a"));
  CHECK(contains(error, "assume_associative(\"why\")"));
  const ReassociationApproval overridden = require_reorderable(
      affine_by_hand(true), "reorder of the loops of f", AssociativityOverride{"scalars only"});
  CHECK(overridden.overridden());
}

TEST_SUITE_END();
