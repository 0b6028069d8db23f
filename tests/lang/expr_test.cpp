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

TEST_CASE("bitwise operators and shifts take integers of one type, and constants adapt") {
  // Inputs hold no u8, but a monoid's state may (and casts make them).
  const Expr b = Halide::Internal::Variable::make(Halide::UInt(8), "b"),
             w = Halide::Internal::Variable::make(i32, "w"), r = Halide::Internal::Variable::make(f32, "r");
  for (const Expr &e : {b & 15, b | b, b ^ 255, b << 1, b >> 3, ~b}) {
    CHECK(!first_type_error(e).has_value());
    CHECK(e.type() == Halide::UInt(8));
  }
  CHECK((w & w).type() == i32);
  CHECK((1 << w).type() == i32);
  // Halide would widen u8 & i32 silently; twist asks for a cast.
  auto mixed = first_type_error(b & w);
  REQUIRE(mixed.has_value());
  CHECK(mixed->find("u8 and i32") != std::string::npos);
  CHECK(!first_type_error(cast(i32, b) & w).has_value());
  for (const Expr &e : {r & r, r << 1, ~r, r | 1}) {
    auto err = first_type_error(e);
    REQUIRE(err.has_value());
    CHECK(err->find("needs integer operands, got f32") != std::string::npos);
  }
  CHECK(first_type_error(b & 0.5).has_value());  // a fractional constant does not fit a u8
  CHECK(min(w, 3).type() == i32);
  CHECK(max(b, 7).type() == Halide::UInt(8));
}
