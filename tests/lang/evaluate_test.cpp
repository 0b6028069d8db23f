#include <doctest/doctest.h>

#include <cfloat>
#include <cmath>
#include <map>
#include <random>

#include "lang/error.h"
#include "lang/evaluate.h"
#include "lang/float_formats.h"
#include "tests/error_capture.h"

using twist::testing::contains;
using twist::testing::error_of;

using namespace twist;
using namespace Halide::Internal;

namespace {

Expr var(const Type &t, const std::string &name) {
  return Expr(Variable::make(t, name));
}

// Compiles e once and evaluates it with the given variable values.
Real evaluate(Arithmetic arithmetic, const Halide::Expr &e, const std::map<std::string, Real> &values = {}) {
  ExprCompiler compiler(arithmetic);
  std::vector<std::pair<int, Real>> bound;
  for (const auto &[name, value] : values) bound.emplace_back(compiler.slot(name), value);
  CompiledExpr f = compiler.compile(e);
  Slots slots(compiler.num_slots());
  for (const auto &[k, value] : bound) slots[k] = value;
  return f(slots);
}

Real exact(const Halide::Expr &e, const std::map<std::string, Real> &values = {}) {
  return evaluate(Arithmetic::exact, e, values);
}

}  // namespace

TEST_CASE("constants and variables") {
  CHECK(exact(Expr(7)) == 7);
  CHECK(exact(UIntImm::make(Halide::UInt(32), 4000000000u)) == 4000000000.0L);
  CHECK(exact(Expr(0.1)) == Real(0.1));
  CHECK(exact(Expr(0.1f)) == Real(0.1f));
  // In typed arithmetic a constant is a value of its type.
  CHECK(evaluate(Arithmetic::typed, make_const(f16, 0.1)) == Real(from_f16_bits(0x2E66)));
  Expr x = var(f64, "x"), y = var(f64, "y");
  CHECK(exact(x - y, {{"x", 5.5}, {"y", 2.25}}) == 3.25);
}

TEST_CASE("floating-point arithmetic on random operands matches double arithmetic") {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal(0.0, 100.0);
  Expr x = var(f64, "x"), y = var(f64, "y");
  for (int k = 0; k < 200; ++k) {
    const double a = normal(rng), b = normal(rng);
    const std::map<std::string, Real> v{{"x", a}, {"y", b}};
    CHECK(exact(x + y, v) == Real(a + b));
    CHECK(exact(x - y, v) == Real(a - b));
    CHECK(exact(x * y, v) == Real(a * b));
    CHECK(exact(x / y, v) == Real(a / b));
    CHECK(exact(x % y, v) == Real(a - b * std::floor(a / b)));
    CHECK(exact(min(x, y), v) == Real(std::min(a, b)));
    CHECK(exact(max(x, y), v) == Real(std::max(a, b)));
    CHECK(exact(-x, v) == Real(-a));
  }
  CHECK(exact(x % y, {{"x", -7.5}, {"y", 2.0}}) == 0.5);  // the remainder takes the divisor's sign
  CHECK(exact(x % y, {{"x", 7.5}, {"y", -2.0}}) == -0.5);
  CHECK(exact(x / y, {{"x", 1.0}, {"y", 0.0}}) == INFINITY);  // only integer division by zero gives zero
  CHECK(std::isnan(exact(min(x, y), {{"x", NAN}, {"y", 1.0}})));
  CHECK(std::isnan(exact(max(x, y), {{"x", 1.0}, {"y", NAN}})));
}

TEST_CASE("integer division and remainder follow Halide on negative operands") {
  Expr a = var(i32, "a"), b = var(i32, "b");
  auto div = [&](int p, int q) { return exact(a / b, {{"a", p}, {"b", q}}); };
  auto mod = [&](int p, int q) { return exact(a % b, {{"a", p}, {"b", q}}); };
  CHECK(div(7, 2) == 3);
  CHECK(mod(7, 2) == 1);
  CHECK(div(-7, 2) == -4);
  CHECK(mod(-7, 2) == 1);
  CHECK(div(7, -2) == -3);
  CHECK(mod(7, -2) == 1);
  CHECK(div(-7, -2) == 4);
  CHECK(mod(-7, -2) == 1);
  CHECK(div(-8, 2) == -4);
  CHECK(mod(-8, 2) == 0);
  CHECK(div(5, 0) == 0);
  CHECK(mod(5, 0) == 0);
  CHECK(div(-5, 0) == 0);
  // Random operands against the defining property: a == q * b + r with 0 <= r < |b|.
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> value(-1000, 1000);
  for (int k = 0; k < 500; ++k) {
    const int p = value(rng), q = value(rng);
    if (q == 0) continue;
    const int r = ((p % q) + std::abs(q)) % std::abs(q);
    CHECK(mod(p, q) == r);
    CHECK(div(p, q) == (p - r) / q);
  }
  CHECK(exact(a + b, {{"a", 2147483647}, {"b", 1}}) == -2147483648.0L);  // i32 wraps
  CHECK(exact(a * b, {{"a", 65536}, {"b", 65536}}) == 0);
}

TEST_CASE("casts: truncation towards zero, wrapping between integers, rounding to narrow floats") {
  Expr x = var(f64, "x"), n = var(i32, "n");
  CHECK(exact(cast(i32, x), {{"x", 2.7}}) == 2);
  CHECK(exact(cast(i32, x), {{"x", -2.7}}) == -2);
  CHECK(exact(cast(i32, x), {{"x", -0.5}}) == 0);
  CHECK(exact(Cast::make(Halide::UInt(8), n), {{"n", 300}}) == 44);
  CHECK(exact(Cast::make(Halide::Int(8), n), {{"n", 200}}) == -56);
  CHECK(exact(cast(boolean, n), {{"n", -3}}) == 1);
  CHECK(exact(cast(f64, n > 0), {{"n", 4}}) == 1.0);
  // Casts between floating-point types: ignored by exact, rounding in typed.
  const std::map<std::string, Real> v{{"x", 2049.0}};
  CHECK(exact(cast(f16, x), v) == 2049);
  CHECK(evaluate(Arithmetic::typed, cast(f16, x), v) == 2048);
  CHECK(evaluate(Arithmetic::typed, cast(bf16, x), v) == 2048);
  CHECK(evaluate(Arithmetic::typed, cast(f32, x), {{"x", 0.1}}) == Real(0.1f));
  CHECK(evaluate(Arithmetic::typed, cast(f16, n), {{"n", 70000}}) == INFINITY);
  CHECK(evaluate(Arithmetic::typed, cast(i32, cast(f16, x)), v) == 2048);
}

TEST_CASE("comparisons, logic and select") {
  Expr x = var(f64, "x"), y = var(f64, "y");
  const std::map<std::string, Real> v{{"x", 1.5}, {"y", 2.5}};
  CHECK(exact(x < y, v) == 1);
  CHECK(exact(x <= y, v) == 1);
  CHECK(exact(x > y, v) == 0);
  CHECK(exact(x >= y, v) == 0);
  CHECK(exact(x == y, v) == 0);
  CHECK(exact(x != y, v) == 1);
  CHECK(exact(x == x, v) == 1);
  CHECK(exact(x < y && y < x, v) == 0);
  CHECK(exact(x < y || y < x, v) == 1);
  CHECK(exact(!(x < y), v) == 0);
  CHECK(exact(select(x < y, x * 2, y * 3), v) == 3.0);
  CHECK(exact(select(x > y, x * 2, y * 3), v) == 7.5);
}

TEST_CASE("select, && and || evaluate only the side they need") {
  int calls = 0;
  ExprCompiler compiler(Arithmetic::exact);
  compiler.on_call([&](const Call *) -> ExprCompiler::CallFn {
    return [&](std::span<const Real>) -> Real {
      ++calls;
      return 1;
    };
  });
  const int n = compiler.slot("n");
  Expr probe = Expr(Call::make(f64, "probe", {Expr(0)}, Call::Halide)), nv = var(i32, "n");
  CompiledExpr guarded = compiler.compile(select(nv > 0, probe, Expr(2.0)));
  CompiledExpr conj = compiler.compile(nv > 0 && probe > 0.0);
  CompiledExpr disj = compiler.compile(nv <= 0 || probe > 0.0);
  Slots slots(compiler.num_slots());
  slots[n] = 0;
  CHECK(guarded(slots) == 2.0);
  CHECK(conj(slots) == 0);
  CHECK(disj(slots) == 1);
  CHECK(calls == 0);
  slots[n] = 1;
  CHECK(guarded(slots) == 1.0);
  CHECK(conj(slots) == 1);
  CHECK(disj(slots) == 1);
  CHECK(calls == 3);  // the || needs its right side now
}

TEST_CASE("let binds a value once, and inner lets shadow outer ones") {
  Expr x = var(f64, "x"), t = var(f64, "t");
  CHECK(exact(Let::make("t", x + 1.0, t * t), {{"x", 2.0}}) == 9.0);
  // let t = x + 1 in (let t = t * 10 in t + 1) + t
  Expr inner = Let::make("t", t * 10.0, t + 1.0);
  CHECK(exact(Let::make("t", x + 1.0, inner + t), {{"x", 2.0}}) == 34.0);
  // A let-bound name does not take the slot of a caller's variable of the same name.
  CHECK(exact(Let::make("x", x * 3.0, x) + x, {{"x", 2.0}}) == 8.0);
}

TEST_CASE("math functions are evaluated in long double and rounded per the arithmetic") {
  Expr x = var(f64, "x"), y = var(f64, "y");
  for (double a : {0.3, 1.7, 2.5, 10.25}) {
    const std::map<std::string, Real> v{{"x", a}, {"y", 1.3}};
    // Exact arithmetic rounds the long double result to double: within half an ulp of the true value, so
    // within an ulp of libm's double function.
    auto near = [](Real got, double want) {
      return std::fabs(static_cast<double>(got) - want) <= 1.01 * (std::nextafter(want, INFINITY) - want);
    };
    CHECK(near(exact(exp(x), v), std::exp(a)));
    CHECK(near(exact(exp2(x), v), std::exp2(a)));
    CHECK(near(exact(log(x), v), std::log(a)));
    CHECK(near(exact(log2(x), v), std::log2(a)));
    CHECK(near(exact(sqrt(x), v), std::sqrt(a)));
    CHECK(near(exact(rsqrt(x), v), 1 / std::sqrt(a)));
    CHECK(near(exact(tanh(x), v), std::tanh(a)));
    CHECK(near(exact(pow(x, y), v), std::pow(a, 1.3)));
    CHECK(exact(floor(x), v) == std::floor(a));
    CHECK(exact(ceil(x), v) == std::ceil(a));
    CHECK(exact(floor(-x), v) == std::floor(-a));
    // Exact results are doubles; extended ones keep long double precision.
    CHECK(exact(exp(x), v) == Real(static_cast<double>(exact(exp(x), v))));
    CHECK(std::fabs(evaluate(Arithmetic::extended, exp(x), v) - std::exp(Real(a))) <=
          4 * LDBL_EPSILON * std::exp(Real(a)));
  }
  // Typed: the result is a value of the argument's type.
  Expr h = var(f16, "h");
  const Real e1 = evaluate(Arithmetic::typed, exp(h), {{"h", 1.0}});
  CHECK(e1 == Real(from_f16_bits(f16_bits(std::exp(1.0)))));
  CHECK(e1 == Real(from_f16_bits(0x4170)));  // 2.71875
}

TEST_CASE("abs, bitwise and shift intrinsics, and likely") {
  Expr x = var(f64, "x"), n = var(i32, "n"), m = var(i32, "m");
  CHECK(exact(Halide::abs(x), {{"x", -2.5}}) == 2.5);
  CHECK(exact(Halide::abs(n), {{"n", -7}}) == 7);
  CHECK(Halide::abs(n).type() == Halide::UInt(32));
  const std::map<std::string, Real> v{{"n", 0b1100}, {"m", 0b1010}};
  CHECK(exact(n & m, v) == 0b1000);
  CHECK(exact(n | m, v) == 0b1110);
  CHECK(exact(n ^ m, v) == 0b0110);
  CHECK(exact(~n, v) == -13);
  CHECK(exact(n << 2, v) == 48);
  CHECK(exact(n >> 2, v) == 3);
  CHECK(exact(n >> 1, {{"n", -7}}) == -4);              // arithmetic shift of a signed value
  CHECK(exact(n << 31, {{"n", 3}}) == -2147483648.0L);  // wraps to i32
  CHECK(exact(Halide::likely(n + 1), v) == 13);
}

TEST_CASE("calls and loads go through the resolvers with evaluated arguments") {
  ExprCompiler compiler(Arithmetic::exact);
  std::vector<std::string> resolved;
  compiler.on_call([&](const Call *c) -> ExprCompiler::CallFn {
    resolved.push_back(c->name);
    return [](std::span<const Real> args) { return args[0] * 100 + args[1]; };
  });
  compiler.on_load([&](const Load *l) -> ExprCompiler::LoadFn {
    resolved.push_back(l->name);
    return [](Real index) { return index * 2; };
  });
  const int i = compiler.slot("i");
  Expr iv = var(i32, "i");
  Expr call = Expr(Call::make(f64, "table", {iv + 1, iv * 3}, Call::Halide));
  Expr load = Expr(
      Load::make(f64, "buffer", iv + 4, Halide::Buffer<>(), Parameter(), const_true(), ModulusRemainder()));
  CompiledExpr f = compiler.compile(call + load);
  CHECK(resolved == std::vector<std::string>{"table", "buffer"});  // at compile time, once
  Slots slots(compiler.num_slots());
  slots[i] = 5;
  CHECK(f(slots) == 615 + 18);
  slots[i] = 2;
  CHECK(f(slots) == 306 + 12);
  CHECK(resolved.size() == 2);
}

TEST_CASE("typed arithmetic rounds every operation to its declared type") {
  Expr h = var(f16, "h"), g = var(f16, "g");
  const std::map<std::string, Real> v{{"h", 2048.0}, {"g", 1.0}};
  CHECK(evaluate(Arithmetic::typed, h + g, v) == 2048);  // 2049 is not an f16: the tie goes to even
  CHECK(exact(h + g, v) == 2049);
  CHECK(evaluate(Arithmetic::typed, h + g * 3, v) == 2052);
  CHECK(evaluate(Arithmetic::typed, h * g - 0.5, {{"h", 1.0}, {"g", 1.0}}) == 0.5);
  CHECK(evaluate(Arithmetic::typed, h * h, {{"h", 300.0}}) == INFINITY);  // 90000 overflows f16
  Expr b = var(bf16, "b");
  CHECK(evaluate(Arithmetic::typed, b + 1.0, {{"b", 256.0}}) == 256);
  CHECK(exact(b + 1.0, {{"b", 256.0}}) == 257);
  Expr s = var(f32, "s");
  const Real tiny = std::ldexp(1.0, -30);
  CHECK(evaluate(Arithmetic::typed, s + Expr(static_cast<float>(tiny)), {{"s", 1.0}}) == 1);
  CHECK(exact(s + Expr(static_cast<float>(tiny)), {{"s", 1.0}}) == 1 + tiny);
  // Extended keeps what double loses.
  Expr d = var(f64, "d");
  const Real tinier = std::ldexp(1.0L, -60);
  CHECK(evaluate(Arithmetic::extended, d + d * Expr(std::ldexp(1.0, -60)), {{"d", 1.0}}) == 1 + tinier);
  CHECK(exact(d + d * Expr(std::ldexp(1.0, -60)), {{"d", 1.0}}) == 1);
}

TEST_CASE("an f16 accumulator stalls where the exact sum goes on") {
  // acc = acc + x, 4096 times with x = 1: in f16 the sum stops at 2048 (2048 + 1 rounds back to 2048).
  Expr acc = var(f16, "acc"), x = var(f16, "x");
  auto accumulate = [&](Arithmetic arithmetic, double step, int n) {
    ExprCompiler compiler(arithmetic);
    const int a = compiler.slot("acc"), k = compiler.slot("x");
    CompiledExpr next = compiler.compile(acc + x);
    Slots slots(compiler.num_slots());
    slots[a] = 0;
    slots[k] = step;
    for (int i = 0; i < n; ++i) slots[a] = next(slots);
    return slots[a];
  };
  CHECK(accumulate(Arithmetic::typed, 1.0, 4096) == 2048);
  CHECK(accumulate(Arithmetic::exact, 1.0, 4096) == 4096);
  // A hand-written f16 accumulation of a non-representable step, rounding after every addition.
  double want = 0;
  for (int i = 0; i < 1000; ++i) want = from_f16_bits(f16_bits(want + from_f16_bits(f16_bits(0.1))));
  CHECK(accumulate(Arithmetic::typed, from_f16_bits(f16_bits(0.1)), 1000) == Real(want));
  CHECK(want != 1000 * from_f16_bits(f16_bits(0.1)));
}

TEST_CASE("ExprCompiler::round rounds like a cast") {
  ExprCompiler typed(Arithmetic::typed), ex(Arithmetic::exact), ext(Arithmetic::extended);
  const Real x = 1 + std::ldexp(1.0L, -60);
  CHECK(ext.round(f16, x) == x);
  CHECK(ex.round(f16, x) == 1);
  CHECK(typed.round(f16, 2049) == 2048);
  CHECK(typed.round(i32, -2.9) == -2);
  CHECK(ex.round(boolean, 0.25) == 1);
  CHECK(contains(error_of([&] { ex.round(i32, 3e9); }), "cannot convert 3000000000 to i32"));
  CHECK(contains(error_of([&] { ex.round(i32, NAN); }), "cannot convert NaN to i32"));
}

TEST_CASE("errors name the node and say what to do") {
  Expr x = var(f64, "x"), y = var(f64, "y");
  {
    ExprCompiler compiler(Arithmetic::exact);
    compiler.slot("x");
    const std::string msg = error_of([&] { compiler.compile(x + y); });
    CHECK(contains(msg, "the variable 'y' has no value"));
    CHECK(contains(msg, "ExprCompiler::slot(\"y\")"));
    CHECK(contains(msg, "((float64)x + (float64)y)"));
  }
  Expr call = Expr(Call::make(f64, "producer", {Expr(1)}, Call::Halide));
  CHECK(contains(error_of([&] { exact(call); }), "the call to func 'producer' has no resolver"));
  {
    ExprCompiler compiler(Arithmetic::exact);
    compiler.on_call([](const Call *) { return ExprCompiler::CallFn(); });
    CHECK(contains(error_of([&] { compiler.compile(call); }),
                   "the resolver does not know the func 'producer'"));
  }
  Expr load = Expr(
      Load::make(f64, "buf", Expr(0), Halide::Buffer<>(), Parameter(), const_true(), ModulusRemainder()));
  CHECK(contains(error_of([&] { exact(load); }), "the load from 'buf' has no resolver"));
  CHECK(contains(error_of([&] { exact(Broadcast::make(x, 4), {{"x", 1}}); }), "vector type f64x4"));
  Expr unknown = Expr(Call::make(f64, "mystery", {x}, Call::PureExtern));
  const std::string msg = error_of([&] { exact(unknown * 2.0, {{"x", 1}}); });
  CHECK(contains(msg, "'mystery' is not a function the evaluator knows"));
  CHECK(contains(msg, "mystery((float64)x)"));
  CHECK(contains(error_of([&] {
                   exact(x + var(i32, "n"), {{"x", 1}, {"n", 1}});
                 }),
                 "carries a type error: '+' of f64 and i32 needs an explicit cast"));
  CHECK(contains(error_of([&] {
                   exact(cast(i32, x), {{"x", NAN}});
                 }),
                 "cannot convert NaN to i32 (in `int32((float64)x)`)"));
  {
    ExprCompiler compiler(Arithmetic::exact);
    compiler.slot("x");
    CompiledExpr f = compiler.compile(x * 2.0);
    Slots empty;
    CHECK(contains(error_of([&] { f(empty); }), "needs 1 slot(s) but was given 0"));
  }
}
