// The canonical integer sums that staging uses for tile-local indices, checked by value as well as by form.
#include <doctest/doctest.h>

#include "scheduler/linear_sums.h"

using namespace Halide;
using namespace Halide::Internal;
using twist::canonical_sum;

namespace {

Expr v(const char *name) {
  return Variable::make(Int(32), name);
}

// e at x = xv, y = yv (through the simplifier, which folds constants).
int64_t at(const Expr &e, int xv, int yv) {
  const Expr c = simplify(substitute({{"x", Expr(xv)}, {"y", Expr(yv)}}, e));
  const int64_t *value = as_const_int(c);
  REQUIRE_MESSAGE(value, "not constant: ", c);
  return *value;
}

}  // namespace

TEST_CASE("a tile's origin subtracted from a coordinate inside the tile cancels") {
  const Expr x = v("x"), y = v("y");
  // ((x*4 + y)*8 + 5) - x*32: Halide's simplifier keeps x in it; the canonical sum is y*8 + 5.
  const Expr e = ((x * 4 + y) * 8 + 5) - x * 32;
  const Expr c = canonical_sum(e);
  CHECK_FALSE(expr_uses_var(c, "x"));
  for (int xv : {-3, 0, 7})
    for (int yv : {-2, 0, 9}) CHECK(at(c, xv, yv) == at(e, xv, yv));
}

TEST_CASE("terms that are not sums or products by constants are kept whole and equal ones collected") {
  const Expr x = v("x"), y = v("y");
  const Expr swizzle = (x >> 3) & 7;
  const Expr e = swizzle * 2 + (y - swizzle) * 3 + 4 - y * 3;
  const Expr c = canonical_sum(e);
  CHECK_FALSE(expr_uses_var(c, "y"));  // y*3 - y*3
  for (int xv : {0, 13, 100})
    for (int yv : {-5, 1}) CHECK(at(c, xv, yv) == at(e, xv, yv));
  CHECK(is_const(canonical_sum(x - x + 6), 6));
}
