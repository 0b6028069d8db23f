// The scheduler's entry point: approvals, refusals with the counterexample, overrides, and the cache.
#include <doctest/doctest.h>

#include "algebra/builtins.h"
#include "algebra/legality.h"
#include "algebra/online.h"
#include "lang/error.h"

using namespace twist;
using namespace twist::algebra;

TEST_SUITE_BEGIN("algebra");

namespace {

Monoid minus() {
  return MonoidBuilder("minus")
      .state({{"x", f32}})
      .identity({0.0})
      .combine([](const State &a, const State &b) { return std::vector<Expr>{a[0] - b[0]}; })
      .build();
}

}  // namespace

TEST_CASE("require_reassociable approves an associative monoid and records how it was decided") {
  const ReassociationApproval approval = require_reassociable(softmax(f32), "split_reduction of P over k");
  CHECK(approval.what == "split_reduction of P over k");
  CHECK(approval.monoid == "softmax_f32");
  CHECK(!approval.overridden());
  CHECK(approval.verdict.accepted);
  CHECK(approval.verdict.level == Level::construction);
  CHECK(approval.to_string().find("split_reduction of P over k") != std::string::npos);
}

TEST_CASE("require_reassociable refuses a non-associative monoid with the counterexample and the way out") {
  try {
    require_reassociable(minus(), "split_reduction of C over k");
    FAIL("a non-associative combine was approved");
  } catch (const twist::Error &e) {
    const std::string message = e.what();
    CHECK(message.find("split_reduction of C over k") != std::string::npos);
    CHECK(message.find("'minus'") != std::string::npos);
    CHECK(message.find("counterexample to") != std::string::npos);
    CHECK(message.find("left side") != std::string::npos);
    CHECK(message.find("FuncSchedule::assume_associative(\"why\")") != std::string::npos);
    CHECK(message.find("MonoidBuilder::domain") != std::string::npos);
  }
}

TEST_CASE("an explicit override is accepted and recorded with its reason which it needs") {
  const ReassociationApproval approval =
      require_reassociable(minus(), "split_reduction of C over k",
                           AssociativityOverride{"the inputs are all zero in this program"});
  CHECK(approval.overridden());
  CHECK(approval.verdict.accepted);
  CHECK(approval.verdict.level == Level::user_override);
  CHECK(approval.override_->reason == "the inputs are all zero in this program");
  CHECK(approval.to_string().find("on the user's word") != std::string::npos);
  CHECK_THROWS_WITH_AS(require_reassociable(minus(), "rfactor of C", AssociativityOverride{""}),
                       doctest::Contains("needs a reason"), twist::Error);
}

TEST_CASE("verdicts are cached by structure so a renamed copy is not checked again and gets its own name") {
  auto make = [](const std::string &name, const std::string &count, const std::string &total) {
    return MonoidBuilder(name)
        .state({{count, f64}, {total, f64}})
        .identity({0.0, 0.0})
        .combine([](const State &p, const State &q) {
          return std::vector<Expr>{p[0] + q[0], p[1] + q[1] * 1.0};
        })
        .build();
  };
  const Monoid a = make("cached_a", "n", "s"), b = make("cached_b", "count", "total");
  CHECK(!has_cached_verdict(a));
  CHECK(!has_cached_verdict(b));
  const ReassociationApproval first = require_reassociable(a, "tile of C over k");
  CHECK(has_cached_verdict(a));
  CHECK(has_cached_verdict(b));  // the same structure under other names
  const ReassociationApproval second = require_reassociable(b, "tile of D over k");
  CHECK(second.verdict.level == first.verdict.level);
  CHECK(second.verdict.notes == first.verdict.notes);
  CHECK(second.monoid == "cached_b");
  CHECK(second.verdict.monoid == "cached_b");
  // Another combine, or other options, is another verdict.
  CHECK(!has_cached_verdict(make("cached_c", "n", "s"), CheckOptions{.trials = 17}));
}

TEST_SUITE_END();
