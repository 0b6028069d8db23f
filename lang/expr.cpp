#include "lang/expr.h"

#include <cmath>

#include "lang/error.h"

namespace twist {

using namespace Halide::Internal;

namespace {

const char *const kTypeErrorName = "twist.type_error";

bool is_constant(const Halide::Expr &e) {
  return e.as<IntImm>() || e.as<FloatImm>() || e.as<UIntImm>();
}

double constant_value(const Halide::Expr &e) {
  if (const auto *i = e.as<IntImm>()) return static_cast<double>(i->value);
  if (const auto *u = e.as<UIntImm>()) return static_cast<double>(u->value);
  return e.as<FloatImm>()->value;
}

bool carries_error(const Halide::Expr &e) {
  return first_type_error(e).has_value();
}

// Brings a and b to one type, or returns a type error; `op` names the operation for the message.
std::optional<Expr> unify(const char *op, Expr &a, Expr &b) {
  if (!a.defined() || !b.defined())
    return type_error(a.defined() ? a.type() : (b.defined() ? b.type() : f32),
                      fmt::format("operand of '{}' is undefined", op));
  if (a.type() == b.type()) return std::nullopt;
  const bool ca = is_constant(a), cb = is_constant(b);
  if (cb && !ca) {
    b = constant(a.type(), constant_value(b), op);
  } else if (ca && !cb) {
    a = constant(b.type(), constant_value(a), op);
  } else if (ca && cb) {
    // Two constants: the wider kind wins (int with float is float).
    const Type t = a.type().is_float() ? a.type() : b.type();
    a = constant(t, constant_value(a), op);
    b = constant(t, constant_value(b), op);
  } else {
    return type_error(a.type(), fmt::format("'{}' of {} and {} needs an explicit cast (cast({}, x) or "
                                            "cast({}, y)); twist never converts types silently",
                                            op, type_name(a.type()), type_name(b.type()), type_name(b.type()),
                                            type_name(a.type())));
  }
  if (carries_error(a)) return a;
  if (carries_error(b)) return b;
  return std::nullopt;
}

Expr require_float(const char *fn, const Expr &x) {
  if (!x.defined()) return type_error(f32, fmt::format("argument of {}() is undefined", fn));
  if (!x.type().is_float())
    return type_error(f32, fmt::format("{}() needs a floating-point argument, got {}; cast it first", fn,
                                       type_name(x.type())));
  return Expr();
}

// Bitwise operators and shifts act on the two's complement bits of one integer type.
Expr require_integer(const char *op, const Expr &x) {
  if (!x.type().is_int() && !x.type().is_uint())
    return type_error(x.type(),
                      fmt::format("'{}' needs integer operands, got {}; bitwise operators and shifts "
                                  "act on the bits of i8..i64 and u8..u64 values",
                                  op, type_name(x.type())));
  return Expr();
}

Expr math(const char *fn, const Expr &x) {
  Expr bad = require_float(fn, x);
  if (bad.defined()) return bad;
  return Expr(Call::make(x.type(), math_call_name(fn, x.type()), {x}, Call::PureExtern));
}

}  // namespace

Expr::Expr(int value) : Halide::Expr(IntImm::make(i32, value)) {}
Expr::Expr(double value) : Halide::Expr(FloatImm::make(f64, value)) {}
Expr::Expr(float value) : Halide::Expr(FloatImm::make(f32, value)) {}

Expr type_error(const Type &t, const std::string &message) {
  return Expr(Call::make(t, kTypeErrorName, {StringImm::make(message)}, Call::PureExtern));
}

std::optional<std::string> first_type_error(const Halide::Expr &e) {
  struct Finder : IRVisitor {
    std::optional<std::string> message;
    using IRVisitor::visit;
    void visit(const Call *c) override {
      if (!message && c->name == kTypeErrorName) message = c->args[0].as<StringImm>()->value;
      IRVisitor::visit(c);
    }
  } finder;
  if (e.defined()) e.accept(&finder);
  return finder.message;
}

Expr constant(const Type &t, double value, const char *context) {
  if (t.is_float()) return Expr(make_const(t, value));
  if (t.is_bool()) {
    if (value == 0 || value == 1) return Expr(make_const(t, value));
  } else if (value == std::floor(value)) {
    return Expr(make_const(t, static_cast<int64_t>(value)));
  }
  return type_error(t, fmt::format("the constant {} in '{}' does not fit the {} operand; cast the operand to "
                                   "a floating-point type first",
                                   value, context, type_name(t)));
}

#define TWIST_ARITH(fn, op, name)                                                                \
  Expr fn(const Expr &a0, const Expr &b0) {                                                      \
    Expr a = a0, b = b0;                                                                         \
    if (auto err = unify(name, a, b)) return *err;                                               \
    if (a.type().is_bool()) return type_error(a.type(), fmt::format("'{}' of two bools", name)); \
    return Expr(static_cast<const Halide::Expr &>(a) op static_cast<const Halide::Expr &>(b));   \
  }
TWIST_ARITH(add, +, "+")
TWIST_ARITH(sub, -, "-")
TWIST_ARITH(mul, *, "*")
TWIST_ARITH(div, /, "/")
TWIST_ARITH(mod, %, "%")
#undef TWIST_ARITH

#define TWIST_COMPARE(fn, op, name)                                                            \
  Expr fn(const Expr &a0, const Expr &b0) {                                                    \
    Expr a = a0, b = b0;                                                                       \
    if (auto err = unify(name, a, b)) return type_error(boolean, *first_type_error(*err));     \
    return Expr(static_cast<const Halide::Expr &>(a) op static_cast<const Halide::Expr &>(b)); \
  }
TWIST_COMPARE(lt, <, "<")
TWIST_COMPARE(le, <=, "<=")
TWIST_COMPARE(gt, >, ">")
TWIST_COMPARE(ge, >=, ">=")
TWIST_COMPARE(eq, ==, "==")
TWIST_COMPARE(ne, !=, "!=")
#undef TWIST_COMPARE

#define TWIST_LOGIC(fn, op, name)                                                                   \
  Expr fn(const Expr &a, const Expr &b) {                                                           \
    for (const Expr *x : {&a, &b}) {                                                                \
      if (!x->defined() || !x->type().is_bool())                                                    \
        return type_error(boolean, fmt::format("'{}' needs bool operands, got {}", name,            \
                                               x->defined() ? type_name(x->type()) : "undefined")); \
      if (auto e = first_type_error(*x)) return type_error(boolean, *e);                            \
    }                                                                                               \
    return Expr(static_cast<const Halide::Expr &>(a) op static_cast<const Halide::Expr &>(b));      \
  }
TWIST_LOGIC(logical_and, &&, "&&")
TWIST_LOGIC(logical_or, ||, "||")
#undef TWIST_LOGIC

#define TWIST_BITS(fn, halide_op, name)                                                                 \
  Expr fn(const Expr &a0, const Expr &b0) {                                                             \
    Expr a = a0, b = b0;                                                                                \
    if (auto err = unify(name, a, b)) return *err;                                                      \
    if (Expr bad = require_integer(name, a); bad.defined()) return bad;                                 \
    return Expr(halide_op(static_cast<const Halide::Expr &>(a), static_cast<const Halide::Expr &>(b))); \
  }
TWIST_BITS(bitwise_and, Halide::operator&, "&")
TWIST_BITS(bitwise_or, Halide::operator|, "|")
TWIST_BITS(bitwise_xor, Halide::operator^, "^")
TWIST_BITS(shift_left, Halide::operator<<, "<<")
TWIST_BITS(shift_right, Halide::operator>>, ">>")
#undef TWIST_BITS

Expr operator~(const Expr &a) {
  if (!a.defined()) return type_error(i32, "operand of '~' is undefined");
  if (auto e = first_type_error(a)) return type_error(a.type(), *e);
  if (Expr bad = require_integer("~", a); bad.defined()) return bad;
  return Expr(~static_cast<const Halide::Expr &>(a));
}

Expr operator-(const Expr &a) {
  if (!a.defined()) return type_error(f32, "operand of unary '-' is undefined");
  return Expr(-static_cast<const Halide::Expr &>(a));
}

Expr operator!(const Expr &a) {
  if (!a.defined() || !a.type().is_bool()) return type_error(boolean, "'!' needs a bool operand");
  return Expr(!static_cast<const Halide::Expr &>(a));
}

Expr min_of(const Expr &a0, const Expr &b0) {
  Expr a = a0, b = b0;
  if (auto err = unify("min", a, b)) return *err;
  return Expr(Min::make(a, b));
}

Expr max_of(const Expr &a0, const Expr &b0) {
  Expr a = a0, b = b0;
  if (auto err = unify("max", a, b)) return *err;
  return Expr(Max::make(a, b));
}

Expr select(const Expr &condition, const Expr &t0, const Expr &f0) {
  Expr t = t0, f = f0;
  if (auto err = unify("select", t, f)) return *err;
  if (!condition.defined() || !condition.type().is_bool())
    return type_error(t.type(), fmt::format("select() needs a bool condition, got {}",
                                            condition.defined() ? type_name(condition.type()) : "undefined"));
  if (auto e = first_type_error(condition)) return type_error(t.type(), *e);
  return Expr(Select::make(condition, t, f));
}

Expr clamp(const Expr &x, const Expr &lo, const Expr &hi) {
  return min_of(max_of(x, lo), hi);
}

Expr cast(const Type &t, const Expr &x) {
  if (!x.defined()) return type_error(t, "argument of cast() is undefined");
  if (x.type() == t) return x;
  return Expr(Cast::make(t, x));
}

Expr abs(const Expr &x) {
  if (!x.defined()) return type_error(f32, "argument of abs() is undefined");
  if (x.type().is_float()) return Expr(Halide::abs(x));
  return select(x < 0, -x, x);
}

Expr exp(const Expr &x) {
  return math("exp", x);
}
Expr exp2(const Expr &x) {
  return math("exp2", x);
}
Expr log(const Expr &x) {
  return math("log", x);
}
Expr log2(const Expr &x) {
  return math("log2", x);
}
Expr sqrt(const Expr &x) {
  return math("sqrt", x);
}
Expr rsqrt(const Expr &x) {
  return math("rsqrt", x);
}
Expr tanh(const Expr &x) {
  return math("tanh", x);
}
Expr floor(const Expr &x) {
  return math("floor", x);
}
Expr ceil(const Expr &x) {
  return math("ceil", x);
}

Expr pow_of(const Expr &x0, const Expr &y0) {
  Expr x = x0, y = y0;
  if (auto err = unify("pow", x, y)) return *err;
  Expr bad = require_float("pow", x);
  if (bad.defined()) return bad;
  return Expr(Call::make(x.type(), math_call_name("pow", x.type()), {x, y}, Call::PureExtern));
}

Expr infinity(const Type &t) {
  return Expr(make_const(t, std::numeric_limits<double>::infinity()));
}
Expr neg_infinity(const Type &t) {
  return Expr(make_const(t, -std::numeric_limits<double>::infinity()));
}

std::string math_call_name(const std::string &function, const Type &t) {
  return function + "_" + type_name(t);
}

std::optional<MathCall> as_math_call(const Call *call) {
  if (call->call_type != Call::PureExtern) return std::nullopt;
  static const char *const functions[] = {"exp",   "exp2", "log",   "log2", "sqrt",
                                          "rsqrt", "tanh", "floor", "ceil", "pow"};
  for (const char *fn : functions) {
    if (call->name == math_call_name(fn, call->type)) return MathCall{fn, call->type};
  }
  return std::nullopt;
}

}  // namespace twist
