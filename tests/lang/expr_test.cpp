#include <doctest/doctest.h>

#include "lang/twist.h"

using namespace twist;

TEST_CASE("operators keep types strict and let constants adapt") {
  Var i("i");
  Input A("expr_A", f16, {8});
  Input B("expr_B", i32, {8});
  Expr a = A(i);
  CHECK(a.type() == f16);
  CHECK((a + 1).type() == f16);
  CHECK((a * 0.5).type() == f16);
  CHECK((2 * a).type() == f16);
  CHECK((i + 1).type() == i32);
  CHECK(!first_type_error(a + 1).has_value());
  CHECK(first_type_error(i * 0.5).has_value());
  auto err = first_type_error(a + B(i));
  REQUIRE(err.has_value());
  CHECK(err->find("f16 and i32") != std::string::npos);
  CHECK(!first_type_error(a + cast(f16, B(i))).has_value());
  CHECK(first_type_error(cast(f32, a) + a).has_value());
  CHECK((exp2(cast(f32, a))).type() == f32);
  CHECK(first_type_error(exp(B(i))).has_value());
  CHECK(max(a, 0).type() == f16);
  CHECK(select(i < 3, a, 0).type() == f16);
}
