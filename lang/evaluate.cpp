#include "lang/evaluate.h"

#include <array>
#include <cmath>
#include <map>

#include "lang/error.h"
#include "lang/float_formats.h"

namespace twist {

using namespace Halide::Internal;

namespace {

using Node = std::function<Real(Slots &)>;

std::string show(const Halide::Expr &e) {
  return fmt::format("{}", e);
}

// ---- Floating-point operations in the three arithmetics ----

using Rounding = double (*)(double);

double keep(double x) {
  return x;
}
double to_f32(double x) {
  return static_cast<float>(x);
}
double to_f16(double x) {
  return from_f16_bits(f16_bits(x));
}
double to_bf16(double x) {
  return from_bf16_bits(bf16_bits(x));
}

// How the double result of an operation of type t is rounded in exact or typed arithmetic. Computing in
// double and rounding once is correctly rounded for +, -, *, / and sqrt of f32, f16 and bf16 operands,
// because double has more than twice their significand bits plus two.
Rounding rounding(Arithmetic arithmetic, const Type &t) {
  if (arithmetic != Arithmetic::typed || t.bits() == 64) return keep;
  if (t.is_bfloat()) return to_bf16;
  return t.bits() == 16 ? to_f16 : to_f32;
}

// A binary floating-point operation: in long double for extended arithmetic, otherwise in double and
// rounded to the declared type where the arithmetic says so.
template <typename Op>
Node float_binary(Arithmetic arithmetic, const Type &t, Node a, Node b, Op op) {
  if (arithmetic == Arithmetic::extended) return [=](Slots &s) -> Real { return op(a(s), b(s)); };
  const Rounding round = rounding(arithmetic, t);
  return [=](Slots &s) -> Real { return round(op(static_cast<double>(a(s)), static_cast<double>(b(s)))); };
}

// The math functions are evaluated in long double and then rounded once to what the arithmetic carries.
template <typename Op>
Node float_math(Arithmetic arithmetic, const Type &t, std::vector<Node> args, Op op) {
  if (arithmetic == Arithmetic::extended) return [=](Slots &s) -> Real { return op(args, s); };
  const Rounding round = rounding(arithmetic, t);
  return [=](Slots &s) -> Real { return round(static_cast<double>(op(args, s))); };
}

// ---- Integer operations: two's complement of the type's width, carried exactly in a Real ----

struct IntegerType {
  int bits;
  bool is_signed;
};

uint64_t to_twos_complement(Real x) {
  return x < 0 ? static_cast<uint64_t>(static_cast<int64_t>(x)) : static_cast<uint64_t>(x);
}

Real from_twos_complement(IntegerType t, uint64_t v) {
  if (t.bits < 64) v &= (uint64_t{1} << t.bits) - 1;
  if (!t.is_signed) return static_cast<Real>(v);
  if (t.bits < 64 && (v >> (t.bits - 1)) & 1) v |= ~uint64_t{0} << t.bits;  // sign extension
  return static_cast<Real>(static_cast<int64_t>(v));
}

// Halide's division: the quotient rounds so that the remainder is never negative (towards negative
// infinity for a positive divisor), and dividing by zero gives zero.
Real integer_divide(IntegerType t, Real a, Real b, bool remainder) {
  if (b == 0) return 0;
  if (!t.is_signed) {
    const uint64_t x = to_twos_complement(a), y = to_twos_complement(b);
    return static_cast<Real>(remainder ? x % y : x / y);
  }
  const auto x = static_cast<int64_t>(a), y = static_cast<int64_t>(b);
  if (y == -1) return remainder ? 0 : from_twos_complement(t, 0 - static_cast<uint64_t>(x));  // no overflow
  int64_t q = x / y, r = x % y;
  if (r < 0) {
    r += y > 0 ? y : -y;
    q -= y > 0 ? 1 : -1;
  }
  return static_cast<Real>(remainder ? r : q);
}

// A shift by a negative amount shifts the other way; shifting out every bit gives 0 (or -1 for a negative
// value shifted right), rather than the undefined behaviour of C++.
Real integer_shift(IntegerType t, Real a, Real amount, bool left) {
  if (amount < 0) {
    amount = -amount;
    left = !left;
  }
  const uint64_t bits = to_twos_complement(a);
  if (left) return amount >= 64 ? 0 : from_twos_complement(t, bits << static_cast<int>(amount));
  if (t.is_signed) {
    const auto x = static_cast<int64_t>(a);
    return static_cast<Real>(amount >= 64 ? (x < 0 ? -1 : 0) : x >> static_cast<int>(amount));
  }
  return amount >= 64 ? 0 : static_cast<Real>(bits >> static_cast<int>(amount));
}

// The value of x converted to integer type t: truncated towards zero, and it must fit.
Real to_integer(const Type &t, Real x) {
  if (std::isnan(x)) fail("cannot convert NaN to {}", type_name(t));
  const Real truncated = std::trunc(x);
  const Real lo = t.is_int() ? -std::ldexp(Real(1), t.bits() - 1) : Real(0);
  const Real hi = std::ldexp(Real(1), t.is_int() ? t.bits() - 1 : t.bits()) - 1;
  if (truncated < lo || truncated > hi)
    fail("cannot convert {} to {}: it is outside the range [{}, {}]", static_cast<double>(x), type_name(t),
         static_cast<double>(lo), static_cast<double>(hi));
  return truncated;
}

Real round_in(Arithmetic arithmetic, const Type &t, Real x) {
  if (t.is_vector()) fail("cannot round to the vector type {}; the evaluator is scalar", type_name(t));
  if (t.is_float())
    return arithmetic == Arithmetic::extended ? x : rounding(arithmetic, t)(static_cast<double>(x));
  if (t.is_bool()) return x != 0;
  if (t.is_int() || t.is_uint()) return to_integer(t, x);
  fail("cannot round a value to {}; the evaluator computes with bool, integer and floating-point types",
       type_name(t));
}

const char *unsupported_node_name(IRNodeType type) {
  switch (type) {
    case IRNodeType::StringImm:
      return "a string";
    case IRNodeType::Broadcast:
      return "a Broadcast";
    case IRNodeType::Ramp:
      return "a Ramp";
    case IRNodeType::Shuffle:
      return "a Shuffle";
    case IRNodeType::VectorReduce:
      return "a VectorReduce";
    default:
      return "an unknown";
  }
}

}  // namespace

// The recursive compiler. It resolves every variable to a slot and every call to a closure once, so that
// evaluation is only closure calls.
struct ExprCompilerImpl {
  ExprCompiler &compiler;
  const Halide::Expr &root;
  std::map<std::string, std::vector<int>> let_slots;  // innermost binding last
  int slots_read = 0;                                 // one more than the highest slot used

  Arithmetic arithmetic() const { return compiler.arithmetic_; }

  [[noreturn]] void refuse(const Halide::Expr &e, const std::string &why) const {
    if (e.same_as(root)) fail("cannot evaluate `{}`: {}", show(e), why);
    fail("cannot evaluate `{}` in `{}`: {}", show(e), show(root), why);
  }

  int use_slot(int k) {
    slots_read = std::max(slots_read, k + 1);
    return k;
  }

  Node compile(const Halide::Expr &e) {
    if (!e.defined()) fail("cannot evaluate an undefined expression (inside `{}`)", show(root));
    if (e.type().is_vector())
      refuse(e, fmt::format("it has the vector type {}; the evaluator is scalar", type_name(e.type())));
    switch (e->node_type) {
      case IRNodeType::IntImm:
        return constant(static_cast<Real>(e.as<IntImm>()->value));
      case IRNodeType::UIntImm:
        return constant(static_cast<Real>(e.as<UIntImm>()->value));
      case IRNodeType::FloatImm:
        return constant(float_constant(e.type(), e.as<FloatImm>()->value));
      case IRNodeType::Cast:
        return cast(e.as<Cast>());
      case IRNodeType::Variable:
        return variable(e.as<Variable>());
      case IRNodeType::Add:
        return arithmetic_op(e.as<Add>(), [](auto x, auto y) { return x + y; });
      case IRNodeType::Sub:
        return arithmetic_op(e.as<Sub>(), [](auto x, auto y) { return x - y; });
      case IRNodeType::Mul:
        return arithmetic_op(e.as<Mul>(), [](auto x, auto y) { return x * y; });
      case IRNodeType::Div:
        return divide(e.as<Div>()->a, e.as<Div>()->b, /*remainder=*/false);
      case IRNodeType::Mod:
        return divide(e.as<Mod>()->a, e.as<Mod>()->b, /*remainder=*/true);
      case IRNodeType::Min:
        return min_max(e.as<Min>()->a, e.as<Min>()->b, /*is_min=*/true);
      case IRNodeType::Max:
        return min_max(e.as<Max>()->a, e.as<Max>()->b, /*is_min=*/false);
      case IRNodeType::EQ:
        return compare(e.as<EQ>(), [](Real x, Real y) { return x == y; });
      case IRNodeType::NE:
        return compare(e.as<NE>(), [](Real x, Real y) { return x != y; });
      case IRNodeType::LT:
        return compare(e.as<LT>(), [](Real x, Real y) { return x < y; });
      case IRNodeType::LE:
        return compare(e.as<LE>(), [](Real x, Real y) { return x <= y; });
      case IRNodeType::GT:
        return compare(e.as<GT>(), [](Real x, Real y) { return x > y; });
      case IRNodeType::GE:
        return compare(e.as<GE>(), [](Real x, Real y) { return x >= y; });
      case IRNodeType::And: {
        Node a = compile(e.as<And>()->a), b = compile(e.as<And>()->b);
        return [=](Slots &s) -> Real { return a(s) != 0 && b(s) != 0; };
      }
      case IRNodeType::Or: {
        Node a = compile(e.as<Or>()->a), b = compile(e.as<Or>()->b);
        return [=](Slots &s) -> Real { return a(s) != 0 || b(s) != 0; };
      }
      case IRNodeType::Not: {
        Node a = compile(e.as<Not>()->a);
        return [=](Slots &s) -> Real { return a(s) == 0; };
      }
      case IRNodeType::Select: {
        const auto *op = e.as<Select>();
        return choose(op->condition, op->true_value, op->false_value);
      }
      case IRNodeType::Let:
        return let(e.as<Let>());
      case IRNodeType::Call:
        return call(e, e.as<Call>());
      case IRNodeType::Load:
        return load(e, e.as<Load>());
      default:
        refuse(e, fmt::format("it is {} node, which the evaluator does not know",
                              unsupported_node_name(e->node_type)));
    }
  }

  static Node constant(Real value) {
    return [value](Slots &) { return value; };
  }

  Real float_constant(const Type &t, double value) const {
    return arithmetic() == Arithmetic::typed ? round_to_type(t, value) : value;
  }

  Node cast(const Cast *op) {
    Node value = compile(op->value);
    const Type to = op->type, from = op->value.type();
    if (to.is_bool()) return [=](Slots &s) -> Real { return value(s) != 0; };
    if (to.is_float()) {
      // The casts of every inner loop (f16 inputs to f32 products): each arithmetic gets its own closure.
      if (arithmetic() == Arithmetic::extended) return value;
      const Rounding round = rounding(arithmetic(), to);
      return [=](Slots &s) -> Real { return round(static_cast<double>(value(s))); };
    }
    if (!to.is_int() && !to.is_uint()) refuse(Halide::Expr(op), fmt::format("it casts to {}", type_name(to)));
    const IntegerType target{to.bits(), to.is_int()};
    if (!from.is_float())  // integer to integer wraps, as in Halide
      return [=](Slots &s) { return from_twos_complement(target, to_twos_complement(value(s))); };
    const Halide::Expr expr(op);
    const std::string where = expr.same_as(root) ? fmt::format("in `{}`", show(root))
                                                 : fmt::format("in `{}` of `{}`", show(expr), show(root));
    return [=](Slots &s) {
      try {
        return to_integer(to, value(s));
      } catch (const Error &error) {
        fail("{} ({})", error.what(), where);
      }
    };
  }

  Node variable(const Variable *v) {
    auto bound = let_slots.find(v->name);
    if (bound != let_slots.end() && !bound->second.empty()) {
      const int k = use_slot(bound->second.back());
      return [k](Slots &s) { return s[k]; };
    }
    const auto &names = compiler.slot_names_;
    auto it = std::find(names.begin(), names.end(), v->name);
    if (it == names.end())
      refuse(Halide::Expr(v), fmt::format("the variable '{}' has no value; give it one with "
                                          "ExprCompiler::slot(\"{}\") before compiling",
                                          v->name, v->name));
    const int k = use_slot(static_cast<int>(it - names.begin()));
    return [k](Slots &s) { return s[k]; };
  }

  template <typename BinaryOp, typename Op>
  Node arithmetic_op(const BinaryOp *op, Op fn) {
    Node a = compile(op->a), b = compile(op->b);
    const Type t = op->type;
    if (t.is_float()) return float_binary(arithmetic(), t, a, b, fn);
    const IntegerType it{t.bits(), t.is_int()};
    // Wrapping +, - and * are the same on the two's complement bits for signed and unsigned types.
    return [=](Slots &s) {
      return from_twos_complement(it, fn(to_twos_complement(a(s)), to_twos_complement(b(s))));
    };
  }

  Node divide(const Halide::Expr &ea, const Halide::Expr &eb, bool remainder) {
    Node a = compile(ea), b = compile(eb);
    const Type t = ea.type();
    if (t.is_float()) {
      if (!remainder) return float_binary(arithmetic(), t, a, b, [](auto x, auto y) { return x / y; });
      // Halide's floating-point remainder takes the sign of the divisor.
      return float_binary(arithmetic(), t, a, b, [](auto x, auto y) { return x - y * std::floor(x / y); });
    }
    const IntegerType it{t.bits(), t.is_int()};
    return [=](Slots &s) { return integer_divide(it, a(s), b(s), remainder); };
  }

  // A NaN operand gives NaN, so that a NaN is never hidden by a min or max.
  Node min_max(const Halide::Expr &ea, const Halide::Expr &eb, bool is_min) {
    Node a = compile(ea), b = compile(eb);
    return [=](Slots &s) -> Real {
      const Real x = a(s), y = b(s);
      if (std::isnan(x) || std::isnan(y)) return std::numeric_limits<Real>::quiet_NaN();
      return is_min ? std::min(x, y) : std::max(x, y);
    };
  }

  template <typename BinaryOp, typename Op>
  Node compare(const BinaryOp *op, Op fn) {
    Node a = compile(op->a), b = compile(op->b);
    return [=](Slots &s) -> Real { return fn(a(s), b(s)); };
  }

  // Only the chosen side is evaluated, so a guarded out-of-bounds access is never made.
  Node choose(const Halide::Expr &condition, const Halide::Expr &if_true, const Halide::Expr &if_false) {
    Node c = compile(condition), t = compile(if_true), f = compile(if_false);
    return [=](Slots &s) { return c(s) != 0 ? t(s) : f(s); };
  }

  Node let(const Let *op) {
    Node value = compile(op->value);
    // Each Let gets its own slot, named so that it cannot collide with a caller's variable.
    const int k = use_slot(static_cast<int>(compiler.slot_names_.size()));
    compiler.slot_names_.push_back(fmt::format("let {} #{}", op->name, k));
    let_slots[op->name].push_back(k);
    Node body = compile(op->body);
    let_slots[op->name].pop_back();
    return [=](Slots &s) {
      s[k] = value(s);
      return body(s);
    };
  }

  std::vector<Node> compile_all(const std::vector<Halide::Expr> &exprs) {
    std::vector<Node> nodes;
    for (const Halide::Expr &x : exprs) nodes.push_back(compile(x));
    return nodes;
  }

  Node call(const Halide::Expr &e, const Call *op) {
    if (auto math = as_math_call(op)) return math_call(e, *math, compile_all(op->args));
    if (op->is_intrinsic({Call::likely, Call::likely_if_innermost})) return compile(op->args[0]);
    if (op->is_intrinsic(Call::abs)) {
      Node x = compile(op->args[0]);
      return [=](Slots &s) { return std::fabs(x(s)); };
    }
    if (op->is_intrinsic(Call::bitwise_not)) {
      Node x = compile(op->args[0]);
      const IntegerType it = integer_type(e);
      return [=](Slots &s) { return from_twos_complement(it, ~to_twos_complement(x(s))); };
    }
    if (op->is_intrinsic(Call::bitwise_and))
      return bitwise(e, op, [](uint64_t x, uint64_t y) { return x & y; });
    if (op->is_intrinsic(Call::bitwise_or))
      return bitwise(e, op, [](uint64_t x, uint64_t y) { return x | y; });
    if (op->is_intrinsic(Call::bitwise_xor))
      return bitwise(e, op, [](uint64_t x, uint64_t y) { return x ^ y; });
    if (op->is_intrinsic({Call::shift_left, Call::shift_right})) {
      Node a = compile(op->args[0]), b = compile(op->args[1]);
      const IntegerType it = integer_type(e);
      const bool left = op->is_intrinsic(Call::shift_left);
      return [=](Slots &s) { return integer_shift(it, a(s), b(s), left); };
    }
    if (op->call_type == Call::Halide || op->call_type == Call::Image) return external_call(e, op);
    refuse(e, fmt::format("'{}' is not a function the evaluator knows (it knows twist's math functions, abs, "
                          "the bitwise and shift intrinsics, likely, and calls to funcs and inputs)",
                          op->name));
  }

  IntegerType integer_type(const Halide::Expr &e) {
    if (!e.type().is_int() && !e.type().is_uint())
      refuse(e, fmt::format("it needs integer operands, not {}", type_name(e.type())));
    return {e.type().bits(), e.type().is_int()};
  }

  template <typename Op>
  Node bitwise(const Halide::Expr &e, const Call *op, Op fn) {
    Node a = compile(op->args[0]), b = compile(op->args[1]);
    const IntegerType it = integer_type(e);
    return [=](Slots &s) {
      return from_twos_complement(it, fn(to_twos_complement(a(s)), to_twos_complement(b(s))));
    };
  }

  Node math_call(const Halide::Expr &e, const MathCall &math, std::vector<Node> args) {
    using Unary = Real (*)(Real);
    static const std::map<std::string, Unary> unary = {
        {"exp", [](Real x) { return std::exp(x); }},   {"exp2", [](Real x) { return std::exp2(x); }},
        {"log", [](Real x) { return std::log(x); }},   {"log2", [](Real x) { return std::log2(x); }},
        {"sqrt", [](Real x) { return std::sqrt(x); }}, {"rsqrt", [](Real x) { return 1 / std::sqrt(x); }},
        {"tanh", [](Real x) { return std::tanh(x); }}, {"floor", [](Real x) { return std::floor(x); }},
        {"ceil", [](Real x) { return std::ceil(x); }},
    };
    if (math.function == "pow")
      return float_math(arithmetic(), math.type, std::move(args),
                        [](const std::vector<Node> &a, Slots &s) { return std::pow(a[0](s), a[1](s)); });
    auto it = unary.find(math.function);
    TWIST_CHECK(it != unary.end(), "math function '{}' of `{}` has no evaluator", math.function, show(e));
    const Unary fn = it->second;
    return float_math(arithmetic(), math.type, std::move(args),
                      [fn](const std::vector<Node> &a, Slots &s) { return fn(a[0](s)); });
  }

  // Calls to funcs and inputs: the arguments go to the resolved closure in a buffer on the stack.

  Node external_call(const Halide::Expr &e, const Call *op) {
    const char *kind = op->call_type == Call::Image ? "input" : "func";
    if (!compiler.resolve_call_)
      refuse(e, fmt::format("the call to {} '{}' has no resolver; set one with ExprCompiler::on_call", kind,
                            op->name));
    ExprCompiler::CallFn fn = compiler.resolve_call_(op);
    if (!fn) refuse(e, fmt::format("the resolver does not know the {} '{}'", kind, op->name));
    if (op->args.size() > ExprCompiler::kMaxCallArguments)
      refuse(e, fmt::format("the call has {} arguments, more than the {} the evaluator supports",
                            op->args.size(), ExprCompiler::kMaxCallArguments));
    std::vector<Node> args = compile_all(op->args);
    return [fn = std::move(fn), args = std::move(args)](Slots &s) {
      std::array<Real, ExprCompiler::kMaxCallArguments> values;
      for (size_t k = 0; k < args.size(); ++k) values[k] = args[k](s);
      return fn(std::span<const Real>(values.data(), args.size()));
    };
  }

  Node load(const Halide::Expr &e, const Load *op) {
    if (!is_const_one(op->predicate))
      refuse(e, "it is a predicated load; the evaluator loads unconditionally");
    if (!compiler.resolve_load_)
      refuse(e,
             fmt::format("the load from '{}' has no resolver; set one with ExprCompiler::on_load", op->name));
    ExprCompiler::LoadFn fn = compiler.resolve_load_(op);
    if (!fn) refuse(e, fmt::format("the resolver does not know the buffer '{}'", op->name));
    Node index = compile(op->index);
    return [fn = std::move(fn), index = std::move(index)](Slots &s) { return fn(index(s)); };
  }
};

ExprCompiler::ExprCompiler(Arithmetic arithmetic) : arithmetic_(arithmetic) {}

int ExprCompiler::slot(const std::string &name) {
  auto it = std::find(slot_names_.begin(), slot_names_.end(), name);
  if (it != slot_names_.end()) return static_cast<int>(it - slot_names_.begin());
  slot_names_.push_back(name);
  return num_slots() - 1;
}

CompiledExpr ExprCompiler::compile(const Halide::Expr &e) {
  if (auto type_error = first_type_error(e))
    fail("cannot evaluate an expression that carries a type error: {}", *type_error);
  ExprCompilerImpl impl{*this, e, {}, 0};
  Node node = impl.compile(e);
  const size_t needed = impl.slots_read;
  const Halide::Expr expr = e;
  // One check per evaluation guards every slot read inside against a Slots vector that is too short.
  return CompiledExpr([node = std::move(node), needed, expr](Slots &s) {
    if (s.size() < needed)
      fail(
          "evaluating `{}` needs {} slot(s) but was given {}; size Slots with ExprCompiler::num_slots() "
          "after "
          "compiling",
          show(expr), needed, s.size());
    return node(s);
  });
}

Real ExprCompiler::round(const Type &t, Real x) const {
  return round_in(arithmetic_, t, x);
}

}  // namespace twist
