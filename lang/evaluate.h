#pragma once
// The meaning of scalar expressions: a compiler from Halide expressions to closures that evaluate them on
// the CPU, in one of three arithmetics. The algebra's checker, the reference backend's func evaluator and its
// loop-nest interpreter all evaluate expressions through this one mechanism.
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lang/expr.h"

namespace twist {

// How floating-point operations are carried out.
enum class Arithmetic {
  exact,     // every floating-point operation in double, whatever the declared type; float-to-float casts
             // are ignored (the oracle: "what the algorithm means")
  extended,  // every floating-point operation in long double (x87, 64-bit significand); used to bound the
             // rounding error of `exact`
  typed,     // each operation rounded to its declared type: f16 and bf16 emulated bit-exactly (round to
             // nearest even), f32 as float, f64 as double; casts round
};

// Values are carried as long double: it holds every i32 and every double exactly. Integer operations follow
// Halide: division rounds towards negative infinity, the remainder is never negative, and x / 0 == 0.
// Integer arithmetic and casts between integer types wrap to the type's width; a cast from floating point
// to an integer type truncates towards zero and throws twist::Error if the value is NaN or does not fit.
// Booleans are 0 and 1. min and max of a NaN are NaN. Select, && and || evaluate only what they need.
using Real = long double;

// Variable values, indexed by the slots an ExprCompiler gave out.
using Slots = std::vector<Real>;

class CompiledExpr {
 public:
  CompiledExpr() = default;
  explicit CompiledExpr(std::function<Real(Slots &)> fn) : fn_(std::move(fn)) {}
  Real operator()(Slots &slots) const { return fn_(slots); }
  bool defined() const { return static_cast<bool>(fn_); }

 private:
  std::function<Real(Slots &)> fn_;
};

class ExprCompiler {
 public:
  explicit ExprCompiler(Arithmetic arithmetic);

  // The slot that variable `name` is read from (allocated on first request).
  int slot(const std::string &name);
  int num_slots() const { return static_cast<int>(slot_names_.size()); }
  Arithmetic arithmetic() const { return arithmetic_; }

  // Calls to funcs and inputs (Call::Halide and Call::Image nodes) are resolved at compile time by this
  // hook, which returns what to do at evaluation time with the evaluated arguments.
  using CallFn = std::function<Real(std::span<const Real> args)>;
  static constexpr size_t kMaxCallArguments = 16;  // compile() refuses calls with more
  void on_call(std::function<CallFn(const Halide::Internal::Call *)> resolver) {
    resolve_call_ = std::move(resolver);
  }

  // Loads (Load nodes, in loop nests) likewise, with the evaluated index.
  using LoadFn = std::function<Real(Real index)>;
  void on_load(std::function<LoadFn(const Halide::Internal::Load *)> resolver) {
    resolve_load_ = std::move(resolver);
  }

  // Throws twist::Error naming the node for variables without a slot that are not Let-bound, unresolved
  // calls and loads, vector types, and nodes the evaluator does not know.
  CompiledExpr compile(const Halide::Expr &e);

  // Rounds x to type t under this compiler's arithmetic, as a cast to t does: a floating-point type to
  // double (exact, where it is the identity on the values exact arithmetic carries), unchanged (extended) or
  // to t itself (typed); an integer type truncates towards zero and must hold the value; bool is x != 0.
  Real round(const Type &t, Real x) const;

 private:
  Arithmetic arithmetic_;
  std::vector<std::string> slot_names_;
  std::function<CallFn(const Halide::Internal::Call *)> resolve_call_;
  std::function<LoadFn(const Halide::Internal::Load *)> resolve_load_;
  friend struct ExprCompilerImpl;
};

}  // namespace twist
