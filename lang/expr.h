#pragma once
// Scalar expressions of the DSL.
//
// twist::Expr is a Halide::Expr (so Halide's simplifier, printer and substitution work on it directly) whose
// operators are stricter than Halide's: two operands of different types are never converted silently. A
// constant adapts to the other operand's type (x + 1, x * 0.5), but f16 + i32 or f16 + f32 needs a cast.
// A type error does not throw where it is made, because the message must name the func being defined: it is
// recorded in the expression as an error node, and the definition that receives the expression reports it.
#include <Halide.h>
#include <fmt/ostream.h>

#include <concepts>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "lang/types.h"

namespace twist {

class Expr : public Halide::Expr {
 public:
  Expr() = default;
  Expr(const Halide::Expr &e) : Halide::Expr(e) {}  // NOLINT: every Halide expression is a twist one.
  Expr(int value);                                  // NOLINT: an i32 constant.
  Expr(double value);                               // NOLINT: an f64 constant.
  Expr(float value);                                // NOLINT: an f32 constant.
};

// An expression that stands for a type error, carrying its message; see the file comment.
Expr type_error(const Type &t, const std::string &message);
// The message of the first type error inside e, if there is one.
std::optional<std::string> first_type_error(const Halide::Expr &e);

template <typename T>
concept Number = std::is_arithmetic_v<T>;

// Converts a number to an expression of type t, or to a type error if that is not exact in kind (a
// fractional constant against an integer operand).
Expr constant(const Type &t, double value, const char *context);

// An operand of the DSL's operators: an expression or a number. The operators are templates so that they
// match exactly, and win over Halide's looser operators, whenever one side is a twist::Expr.
template <typename T>
concept Operand = std::derived_from<T, Halide::Expr> || Number<T>;
template <typename A, typename B>
concept TwistOperands = Operand<A> && Operand<B> &&(std::derived_from<A, Expr> || std::derived_from<B, Expr>);

template <Operand T>
Expr to_expr(const T &x) {
  if constexpr (std::is_integral_v<T>)
    return Expr(static_cast<int>(x));
  else if constexpr (std::is_floating_point_v<T>)
    return Expr(x);
  else
    return Expr(static_cast<const Halide::Expr &>(x));
}

Expr add(const Expr &a, const Expr &b);
Expr sub(const Expr &a, const Expr &b);
Expr mul(const Expr &a, const Expr &b);
Expr div(const Expr &a, const Expr &b);
Expr mod(const Expr &a, const Expr &b);
Expr lt(const Expr &a, const Expr &b);
Expr le(const Expr &a, const Expr &b);
Expr gt(const Expr &a, const Expr &b);
Expr ge(const Expr &a, const Expr &b);
Expr eq(const Expr &a, const Expr &b);
Expr ne(const Expr &a, const Expr &b);
Expr logical_and(const Expr &a, const Expr &b);
Expr logical_or(const Expr &a, const Expr &b);
Expr min_of(const Expr &a, const Expr &b);
Expr max_of(const Expr &a, const Expr &b);
Expr pow_of(const Expr &a, const Expr &b);
// Bitwise operators and shifts take integers of one type (a constant adapts) and give that type. A shift by
// a negative amount shifts the other way, and shifting out every bit gives 0 (-1 for a negative value
// shifted right), as in Halide.
Expr bitwise_and(const Expr &a, const Expr &b);
Expr bitwise_or(const Expr &a, const Expr &b);
Expr bitwise_xor(const Expr &a, const Expr &b);
Expr shift_left(const Expr &a, const Expr &b);
Expr shift_right(const Expr &a, const Expr &b);

#define TWIST_BINARY(signature, impl)                                   \
  template <typename A, typename B>                                     \
  requires TwistOperands<A, B> Expr signature(const A &a, const B &b) { \
    return impl(to_expr(a), to_expr(b));                                \
  }
TWIST_BINARY(operator+, add)
TWIST_BINARY(operator-, sub)
TWIST_BINARY(operator*, mul)
TWIST_BINARY(operator/, div)
TWIST_BINARY(operator%, mod)
TWIST_BINARY(operator<, lt)
TWIST_BINARY(operator<=, le)
TWIST_BINARY(operator>, gt)
TWIST_BINARY(operator>=, ge)
TWIST_BINARY(operator==, eq)
TWIST_BINARY(operator!=, ne)
TWIST_BINARY(operator&&, logical_and)
TWIST_BINARY(operator||, logical_or)
TWIST_BINARY(operator&, bitwise_and)
TWIST_BINARY(operator|, bitwise_or)
TWIST_BINARY(operator^, bitwise_xor)
TWIST_BINARY(operator<<, shift_left)
TWIST_BINARY(operator>>, shift_right)
TWIST_BINARY(min, min_of)
TWIST_BINARY(max, max_of)
TWIST_BINARY(pow, pow_of)
#undef TWIST_BINARY

Expr operator-(const Expr &a);
Expr operator!(const Expr &a);
Expr operator~(const Expr &a);  // bitwise not of an integer

Expr select(const Expr &condition, const Expr &if_true, const Expr &if_false);
Expr clamp(const Expr &x, const Expr &lo, const Expr &hi);
Expr cast(const Type &t, const Expr &x);
template <Number N>
Expr cast(const Type &t, N x) {
  return cast(t, to_expr(x));
}
Expr abs(const Expr &x);

// Floating-point functions. Each keeps its argument's type (f16, bf16, f32 or f64); integers are refused.
Expr exp(const Expr &x);
Expr exp2(const Expr &x);
Expr log(const Expr &x);
Expr log2(const Expr &x);
Expr sqrt(const Expr &x);
Expr rsqrt(const Expr &x);
Expr tanh(const Expr &x);
Expr floor(const Expr &x);
Expr ceil(const Expr &x);

// Constants of a floating-point type.
Expr infinity(const Type &t);
Expr neg_infinity(const Type &t);

// The same expressions as plain Halide ones (for Halide's utilities and the IR).
inline std::vector<Halide::Expr> to_halide(const std::vector<Expr> &v) {
  return {v.begin(), v.end()};
}

// The math functions above are calls named "<function>_<type>", e.g. "exp2_f32". These recover the parts.
struct MathCall {
  std::string function;  // "exp", "exp2", "log", ...
  Type type;
};
std::optional<MathCall> as_math_call(const Halide::Internal::Call *call);
std::string math_call_name(const std::string &function, const Type &t);

}  // namespace twist

// Expressions print through Halide's printer in messages: fmt::format("{}", e).
template <>
struct fmt::formatter<Halide::Expr> : fmt::ostream_formatter {};
template <>
struct fmt::formatter<twist::Expr> : fmt::ostream_formatter {};
