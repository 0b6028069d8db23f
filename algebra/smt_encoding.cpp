#include "algebra/smt_encoding.h"

#include <cmath>
#include <cstdlib>

namespace twist::algebra {

namespace {

using namespace Halide::Internal;

std::string shown(const Halide::Expr &e) {
  return fmt::format("{}", e);
}

// The decimal digits of m * 2^k, for k >= 0 (a double's value is an integer times a power of two).
std::string decimal_times_power_of_two(uint64_t m, int k) {
  std::string digits = std::to_string(m);  // most significant first
  for (int i = 0; i < k; ++i) {
    int carry = 0;
    for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
      const int d = (*it - '0') * 2 + carry;
      *it = static_cast<char>('0' + d % 10);
      carry = d / 10;
    }
    if (carry) digits.insert(digits.begin(), static_cast<char>('0' + carry));
  }
  return digits;
}

// The exact value of a finite double as "n" or "n/d".
std::string exact_rational(double value) {
  if (value == 0) return "0";
  int exponent = 0;
  const double fraction = std::frexp(std::fabs(value), &exponent);
  auto mantissa = static_cast<uint64_t>(std::ldexp(fraction, 53));
  exponent -= 53;
  while (exponent < 0 && mantissa % 2 == 0) {
    mantissa /= 2;
    ++exponent;
  }
  const std::string sign = value < 0 ? "-" : "";
  if (exponent >= 0) return sign + decimal_times_power_of_two(mantissa, exponent);
  return sign + std::to_string(mantissa) + "/" + decimal_times_power_of_two(1, -exponent);
}

bool is_integer(const Type &t) {
  return (t.is_int() || t.is_uint()) && !t.is_bool();
}

}  // namespace

z3::expr SmtEncoder::unknown(const std::string &name, const Type &t) {
  if (t.is_bool()) return context_.bool_const(name.c_str());
  if (t.is_float()) return context_.real_const(name.c_str());
  if (is_integer(t)) return context_.bv_const(name.c_str(), t.bits());
  throw NotEncodable(
      fmt::format("'{}' has type {}, which the SMT encoding does not have", name, type_name(t)));
}

z3::expr SmtEncoder::constant(const Type &t, double value) {
  if (t.is_bool()) return context_.bool_val(value != 0);
  if (t.is_float()) {
    if (!std::isfinite(value)) throw NotEncodable(fmt::format("the constant {} is not a real number", value));
    return context_.real_val(exact_rational(value).c_str());
  }
  if (is_integer(t)) return context_.bv_val(static_cast<uint64_t>(static_cast<int64_t>(value)), t.bits());
  throw NotEncodable(fmt::format("a constant of type {}", type_name(t)));
}

z3::expr SmtEncoder::to_real(const z3::expr &term, const Type &from) {
  if (from.is_bool()) return z3::ite(term, context_.real_val(1), context_.real_val(0));
  if (from.is_float()) return term;
  return z3::to_real(z3::bv2int(term, from.is_int()));
}

z3::expr SmtEncoder::cast(const Type &to, const Halide::Expr &value) {
  const Type from = value.type();
  const z3::expr x = encode(value);
  if (to.is_bool()) {
    if (from.is_bool()) return x;
    if (from.is_float()) return x != context_.real_val(0);
    return x != context_.bv_val(0, from.bits());
  }
  // Exact arithmetic ignores float-to-float casts, which is the operation this level proves things about.
  if (to.is_float()) return to_real(x, from);
  if (!is_integer(to)) throw NotEncodable(fmt::format("a cast to {}", type_name(to)));
  if (from.is_bool()) return z3::ite(x, context_.bv_val(1, to.bits()), context_.bv_val(0, to.bits()));
  if (from.is_float())
    throw NotEncodable(fmt::format("a cast from {} to {} (it truncates, and fails outside the range)",
                                   type_name(from), type_name(to)));
  // Integer to integer wraps to the target's width: drop high bits, or extend by the source's signedness.
  if (to.bits() == from.bits()) return x;
  if (to.bits() < from.bits()) return x.extract(to.bits() - 1, 0);
  const unsigned extra = to.bits() - from.bits();
  return from.is_int() ? z3::sext(x, extra) : z3::zext(x, extra);
}

// Halide's division and remainder (lang/evaluate.h): x / 0 == 0 and x % 0 == 0; signed division rounds
// so that the remainder is never negative.
z3::expr SmtEncoder::divide(const Halide::Expr &ea, const Halide::Expr &eb, bool remainder) {
  const Type t = ea.type();
  const z3::expr a = encode(ea), b = encode(eb);
  if (t.is_float()) {
    if (remainder)
      throw NotEncodable(fmt::format("a floating-point remainder in `{} % {}`", shown(ea), shown(eb)));
    return a / b;
  }
  const z3::expr zero = context_.bv_val(0, t.bits()), one = context_.bv_val(1, t.bits());
  if (!t.is_int()) return z3::ite(b == zero, zero, remainder ? z3::urem(a, b) : z3::udiv(a, b));
  const z3::expr q = a / b;  // bvsdiv: rounds towards zero
  const z3::expr r = z3::srem(a, b);
  const z3::expr negative = r < zero;
  const z3::expr positive_divisor = b > zero;
  const z3::expr adjusted_r = z3::ite(negative, r + z3::ite(positive_divisor, b, -b), r);
  const z3::expr adjusted_q = z3::ite(negative, z3::ite(positive_divisor, q - one, q + one), q);
  return z3::ite(b == zero, zero, remainder ? adjusted_r : adjusted_q);
}

z3::expr SmtEncoder::call(const Call *op, const Halide::Expr &e) {
  if (op->is_intrinsic({Call::likely, Call::likely_if_innermost})) return encode(op->args[0]);
  const Type t = e.type();
  if (op->is_intrinsic(Call::abs)) {
    const Type arg = op->args[0].type();
    const z3::expr x = encode(op->args[0]);
    if (arg.is_float()) return z3::ite(x < 0, -x, x);
    if (!arg.is_int()) return x;
    return z3::ite(x < context_.bv_val(0, arg.bits()), -x, x);  // the bits of |x| as the unsigned result
  }
  if (is_integer(t)) {
    if (op->is_intrinsic(Call::bitwise_not)) return ~encode(op->args[0]);
    if (op->is_intrinsic(Call::bitwise_and)) return encode(op->args[0]) & encode(op->args[1]);
    if (op->is_intrinsic(Call::bitwise_or)) return encode(op->args[0]) | encode(op->args[1]);
    if (op->is_intrinsic(Call::bitwise_xor)) return encode(op->args[0]) ^ encode(op->args[1]);
    if (op->is_intrinsic({Call::shift_left, Call::shift_right})) {
      const z3::expr x = encode(op->args[0]);
      z3::expr amount = encode(op->args[1]);
      const Type amount_type = op->args[1].type();
      if (amount_type.bits() < t.bits())
        amount = amount_type.is_int() ? z3::sext(amount, t.bits() - amount_type.bits())
                                      : z3::zext(amount, t.bits() - amount_type.bits());
      else if (amount_type.bits() > t.bits())
        throw NotEncodable(fmt::format("a shift by a wider amount in `{}`", shown(e)));
      // A negative amount shifts the other way (lang/evaluate.h).
      const bool left = op->is_intrinsic(Call::shift_left);
      const z3::expr negative =
          amount_type.is_int() ? amount < context_.bv_val(0, t.bits()) : context_.bool_val(false);
      const z3::expr magnitude = z3::ite(negative, -amount, amount);
      const z3::expr shifted_left = z3::shl(x, magnitude);
      const z3::expr shifted_right = t.is_int() ? z3::ashr(x, magnitude) : z3::lshr(x, magnitude);
      return left ? z3::ite(negative, shifted_right, shifted_left)
                  : z3::ite(negative, shifted_left, shifted_right);
    }
  }
  throw NotEncodable(
      fmt::format("`{}` has no exact encoding (only +, -, *, /, %, min, max, abs, select, "
                  "comparisons, bitwise operators and shifts do)",
                  shown(e)));
}

z3::expr SmtEncoder::encode(const Halide::Expr &e) {
  const Type t = e.type();
  auto both = [&](const auto *op) { return std::pair{encode(op->a), encode(op->b)}; };
  // Comparisons of integers depend on the operands' signedness, which z3's bit-vectors do not carry.
  auto less = [&](const z3::expr &a, const z3::expr &b, const Type &operands) {
    return operands.is_uint() && !operands.is_bool() ? z3::ult(a, b) : a < b;
  };
  auto less_equal = [&](const z3::expr &a, const z3::expr &b, const Type &operands) {
    return operands.is_uint() && !operands.is_bool() ? z3::ule(a, b) : a <= b;
  };
  switch (e->node_type) {
    case IRNodeType::IntImm:
      return constant(t, static_cast<double>(e.as<IntImm>()->value));
    case IRNodeType::UIntImm:
      if (t.is_bool()) return context_.bool_val(e.as<UIntImm>()->value != 0);
      return context_.bv_val(static_cast<uint64_t>(e.as<UIntImm>()->value), t.bits());
    case IRNodeType::FloatImm:
      return constant(t, e.as<FloatImm>()->value);
    case IRNodeType::Cast:
      return cast(t, e.as<Cast>()->value);
    case IRNodeType::Variable: {
      const std::string &name = e.as<Variable>()->name;
      auto it = bound_.find(name);
      if (it == bound_.end()) throw NotEncodable(fmt::format("the variable '{}' has no value", name));
      return it->second;
    }
    case IRNodeType::Add: {
      auto [a, b] = both(e.as<Add>());
      return a + b;
    }
    case IRNodeType::Sub: {
      auto [a, b] = both(e.as<Sub>());
      return a - b;
    }
    case IRNodeType::Mul: {
      auto [a, b] = both(e.as<Mul>());
      return a * b;
    }
    case IRNodeType::Div:
      return divide(e.as<Div>()->a, e.as<Div>()->b, false);
    case IRNodeType::Mod:
      return divide(e.as<Mod>()->a, e.as<Mod>()->b, true);
    case IRNodeType::Min: {
      auto [a, b] = both(e.as<Min>());
      return z3::ite(less_equal(a, b, t), a, b);
    }
    case IRNodeType::Max: {
      auto [a, b] = both(e.as<Max>());
      return z3::ite(less_equal(b, a, t), a, b);
    }
    case IRNodeType::EQ: {
      auto [a, b] = both(e.as<EQ>());
      return a == b;
    }
    case IRNodeType::NE: {
      auto [a, b] = both(e.as<NE>());
      return a != b;
    }
    case IRNodeType::LT: {
      auto [a, b] = both(e.as<LT>());
      return less(a, b, e.as<LT>()->a.type());
    }
    case IRNodeType::LE: {
      auto [a, b] = both(e.as<LE>());
      return less_equal(a, b, e.as<LE>()->a.type());
    }
    case IRNodeType::GT: {
      auto [a, b] = both(e.as<GT>());
      return less(b, a, e.as<GT>()->a.type());
    }
    case IRNodeType::GE: {
      auto [a, b] = both(e.as<GE>());
      return less_equal(b, a, e.as<GE>()->a.type());
    }
    case IRNodeType::And: {
      auto [a, b] = both(e.as<And>());
      return a && b;
    }
    case IRNodeType::Or: {
      auto [a, b] = both(e.as<Or>());
      return a || b;
    }
    case IRNodeType::Not:
      return !encode(e.as<Not>()->a);
    case IRNodeType::Select: {
      const Select *op = e.as<Select>();
      return z3::ite(encode(op->condition), encode(op->true_value), encode(op->false_value));
    }
    case IRNodeType::Let: {
      const Let *op = e.as<Let>();
      const z3::expr value = encode(op->value);
      auto previous = bound_.find(op->name);
      const std::optional<z3::expr> shadowed =
          previous == bound_.end() ? std::nullopt : std::optional<z3::expr>(previous->second);
      bind(op->name, value);
      const z3::expr body = encode(op->body);
      if (shadowed)
        bind(op->name, *shadowed);
      else
        bound_.erase(op->name);
      return body;
    }
    case IRNodeType::Call:
      return call(e.as<Call>(), e);
    default:
      throw NotEncodable(fmt::format("`{}` has no exact encoding", shown(e)));
  }
}

long double SmtEncoder::value_of(const z3::model &model, const z3::expr &term, const Type &t) {
  const z3::expr v = model.eval(term, true);
  if (t.is_bool()) return v.is_true() ? 1 : 0;
  if (t.is_float()) return std::strtold(v.get_decimal_string(40).c_str(), nullptr);
  const uint64_t bits = v.get_numeral_uint64();
  if (t.is_uint() || t.bits() == 64)
    return t.is_uint() ? static_cast<long double>(bits)
                       : static_cast<long double>(static_cast<int64_t>(bits));
  const uint64_t sign = uint64_t{1} << (t.bits() - 1);
  return bits & sign ? static_cast<long double>(static_cast<int64_t>(bits) - static_cast<int64_t>(sign << 1))
                     : static_cast<long double>(bits);
}

}  // namespace twist::algebra
