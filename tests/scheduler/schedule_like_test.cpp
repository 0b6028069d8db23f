// The library's GEMM schedules on a user's own contraction, through Schedule::set_like (apps/gemm/gemm.h says
// what must match): loops of the same names take the schedule whatever the funcs and inputs are called, and a
// loop the user named differently is refused with the name and the func's loops.
#include <doctest/doctest.h>

#include "algebra/builtins.h"
#include "apps/gemm/gemm.h"
#include "lang/error.h"
#include "scheduler/lower.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using namespace twist::apps;
using namespace twist::testing;

TEST_CASE("the SIMT GEMM schedule applies to a user's contraction with the same loop names") {
  const Gemm g = make_gemm({.input = f16, .output = f32});
  SizeParam rows("user_rows"), cols("user_cols"), depth("user_depth");
  Input x("user_X", f16, {rows, depth}), w("user_W", f16, {depth, cols});
  Var i("i"), j("j");
  RDom k({{0, depth}}, g.k.name());  // the same name as the library's reduction domain: "k.x" is its loop
  Func y("user_Y");
  y(i, j) = reduce(algebra::sum(f32), k, cast(f32, x(i, k.x)) * cast(f32, w(k.x, j)));
  y.set_shape({rows, cols});

  Schedule s;
  s.set_like(y, *schedule_simt(g).find(g.C.name()));
  const std::map<std::string, double> sizes = {{"user_rows", 70}, {"user_cols", 45}, {"user_depth", 33}};
  CHECK(lowered_error(y, s, random_inputs(y, sizes, 5), sizes) < 1e-6);
}

TEST_CASE("a user's contraction whose loops are named otherwise is refused, naming the loop") {
  const Gemm g = make_gemm({.input = f16, .output = f32});
  SizeParam rows("named_rows"), cols("named_cols"), depth("named_depth");
  Input x("named_X", f16, {rows, depth}), w("named_W", f16, {depth, cols});
  Var row("row"), col("col");
  RDom k({{0, depth}}, g.k.name());
  Func y("named_Y");
  y(row, col) = reduce(algebra::sum(f32), k, cast(f32, x(row, k.x)) * cast(f32, w(k.x, col)));
  y.set_shape({rows, cols});
  Schedule s;
  s.set_like(y, *schedule_simt(g).find(g.C.name()));
  std::string message;
  try {
    lower(y, s, Target::sm80());
  } catch (const Error &e) {
    message = e.what();
  }
  CHECK(message.find("'i' is not one of its loops") != std::string::npos);
  CHECK(message.find("row") != std::string::npos);
}
