#pragma once
// Numeric evaluation of a monoid's expressions, through the one expression evaluator (lang/evaluate.h).
//
// The checker, the error analysis and the tests all evaluate identity, lift, combine and finalize many
// times on many states, so the expressions are compiled once per arithmetic and evaluated with values
// passed positionally.
#include <span>
#include <string>
#include <vector>

#include "lang/evaluate.h"
#include "lang/monoid.h"

namespace twist::algebra {

// The values of one state, one element or one output, in component order.
using Values = std::vector<Real>;

// The variable names of a symbolic state, in component order ("a.m", "a.l", ...).
std::vector<std::string> variable_names(const State &state);
// The names and the types of components, in order.
std::vector<std::string> component_names(const std::vector<Component> &components);
std::vector<Type> component_types(const std::vector<Component> &components);

// a followed by b: the arguments of a function of several states, or its parameter names.
template <typename T>
std::vector<T> joined(std::vector<T> a, const std::vector<T> &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Expressions over named variables, compiled once and evaluated many times.
class VectorFunction {
 public:
  VectorFunction() = default;
  // `parameters` are the variables whose values each call passes, in that order.
  VectorFunction(Arithmetic arithmetic, const std::vector<std::string> &parameters,
                 const std::vector<Expr> &results);
  Values operator()(const Values &arguments) const;
  int arity() const { return arity_; }

 private:
  std::vector<CompiledExpr> results_;
  std::vector<int> parameter_slots_;
  int arity_ = 0;
  mutable Slots slots_;
};

// A monoid's expressions, compiled for one arithmetic.
class MonoidEvaluator {
 public:
  MonoidEvaluator(const Monoid &monoid, Arithmetic arithmetic);

  const Monoid &monoid() const { return monoid_; }
  Arithmetic arithmetic() const { return arithmetic_; }

  const Values &identity() const { return identity_; }
  Values lift(const Values &element) const { return lift_(element); }
  Values combine(const Values &a, const Values &b) const;
  Values finalize(const Values &state) const { return finalize_(state); }
  // The leftward fold of the lifted elements from the identity: (((e . x1) . x2) ...).
  Values fold(std::span<const Values> elements) const;
  // The user's sequential fold (Monoid::step) from the identity; throws twist::Error without a step.
  bool has_step() const { return !monoid_.step.empty(); }
  Values step(const Values &state, const Values &element) const;
  Values step_fold(std::span<const Values> elements) const;

 private:
  Monoid monoid_;
  Arithmetic arithmetic_;
  Values identity_;
  VectorFunction lift_, combine_, finalize_, step_;
};

}  // namespace twist::algebra
