// Lowerings that fold the points of a reduction out of their order ask for commutativity: a reorder of the
// loops of a multi-dimensional RDom, and a tree over a monoid declared commutative (whose claim is
// checked, not trusted).
#include <doctest/doctest.h>

#include "algebra/builtins.h"
#include "lang/twist.h"
#include "scheduler/lower.h"
#include "tests/algebra/test_support.h"
#include "tests/error_capture.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using twist::algebra::testing::affine_by_hand;
using twist::testing::contains;
using twist::testing::error_of;
using twist::testing::lowered_error;
using twist::testing::random_inputs;

TEST_CASE("a reorder of the loops of a two-dimensional RDom needs a commutative monoid") {
  SizeParam rows("ro_rows");
  Input a("ro_a", f64, {rows, Expr(5), Expr(7)}), b("ro_b", f64, {rows, Expr(5), Expr(7)});
  Var i("i");
  RDom r({{0, 7}, {0, 5}}, "ro_r");
  const std::map<std::string, double> sizes = {{"ro_rows", 40}};
  auto reordered = [](const Func &f) {
    Schedule s;
    s[f].split("i", "io", "it", 32)
        .bind("io", Binding::block_x)
        .bind("it", Binding::thread)
        .reorder({"ro_r.y", "ro_r.x"});  // r.y innermost: the points in column order
    return s;
  };

  Func sum_f("ro_sum");
  sum_f(i) = reduce(algebra::sum(f64), r, a(i, r.y, r.x));
  sum_f.set_shape({rows});
  const Schedule sum_schedule = reordered(sum_f);
  CHECK(contains(to_string(lower(sum_f, sum_schedule, Target::sm90a())), "associative and commutative"));
  CHECK(lowered_error(sum_f, sum_schedule, random_inputs(sum_f, sizes, 3), sizes) < 1e-12);

  Func f("ro_affine");
  f(i) = reduce(affine_by_hand(false), r, std::vector<Expr>{a(i, r.y, r.x), b(i, r.y, r.x)});
  f.set_shape({rows});
  Schedule s = reordered(f);
  const std::string error = error_of([&] { lower(f, s, Target::sm90a()); });
  CHECK(contains(error, "reorder of the reduction loops of ro_affine"));
  CHECK(contains(error, "ro_r.x"));
  CHECK(contains(error, "ro_r.y"));
  CHECK(contains(error, "commutativity: a . b == b . a"));
  CHECK(contains(error, "counterexample"));
  // Without the reorder the same schedule keeps the points in order and lowers.
  Schedule in_order;
  in_order[f].split("i", "io", "it", 32).bind("io", Binding::block_x).bind("it", Binding::thread);
  CHECK(lowered_error(f, in_order, random_inputs(f, sizes, 4), sizes) < 1e-9);
  // The user's word lowers it.
  s[f].assume_associative("the test's maps commute");
  CHECK(error_of([&] { lower(f, s, Target::sm90a()); }).empty());
}

TEST_CASE("a monoid declared commutative that is not is refused by the tree that would rely on it") {
  SizeParam rows("dc_rows"), cols("dc_cols");
  Input a("dc_a", f64, {rows, cols}), b("dc_b", f64, {rows, cols});
  Var i("i");
  RDom r({{0, cols}}, "dc_r");
  Func f("dc_f");
  f(i) = reduce(affine_by_hand(true), r, std::vector<Expr>{a(i, r.x), b(i, r.x)});
  f.set_shape({rows});
  const std::string error = error_of([&] { lower(f, Schedule(), Target::sm90a()); });
  CHECK(contains(error, "cooperative tree of dc_f"));
  CHECK(contains(error, "declared commutative"));
  CHECK(contains(error, "NOT accepted as commutative"));
  CHECK(contains(error, "counterexample"));
  // Declared truthfully (not commutative), the tree keeps the points in runs and matches the oracle.
  Func g("dc_g");
  g(i) = reduce(affine_by_hand(false), r, std::vector<Expr>{a(i, r.x), b(i, r.x)});
  g.set_shape({rows});
  const std::map<std::string, double> sizes = {{"dc_rows", 3}, {"dc_cols", 100}};
  CHECK(lowered_error(g, Schedule(), random_inputs(g, sizes, 5), sizes) < 1e-9);
}

TEST_CASE("a reorder of the reduction loops of a tree needs a commutative monoid too") {
  SizeParam rows("tr_rows");
  Input a("tr_a", f64, {rows, Expr(5), Expr(7)}), b("tr_b", f64, {rows, Expr(5), Expr(7)});
  Var i("i");
  RDom r({{0, 7}, {0, 5}}, "tr_r");
  Func f("tr_affine");
  f(i) = reduce(affine_by_hand(false), r, std::vector<Expr>{a(i, r.y, r.x), b(i, r.y, r.x)});
  f.set_shape({rows});
  Schedule s;
  s[f].reorder({"tr_r.y", "tr_r.x"});
  const std::string error = error_of([&] { lower(f, s, Target::sm90a()); });
  CHECK(
      contains(error, "reorder of the reduction loops of tr_affine (from tr_r.y, tr_r.x to tr_r.x, tr_r.y"));
  CHECK(contains(error, "commutativity: a . b == b . a"));
  // Without the reorder the default tree keeps the points in order.
  const std::map<std::string, double> sizes = {{"tr_rows", 3}};
  CHECK(lowered_error(f, Schedule(), random_inputs(f, sizes, 6), sizes) < 1e-9);
}
