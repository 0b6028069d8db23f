#include "algebra/monoid_evaluator.h"

#include "lang/error.h"

namespace twist::algebra {

std::vector<std::string> variable_names(const State &state) {
  std::vector<std::string> names;
  for (const Expr &v : state.vars()) names.push_back(v.as<Halide::Internal::Variable>()->name);
  return names;
}

std::vector<std::string> component_names(const std::vector<Component> &components) {
  std::vector<std::string> names;
  for (const Component &c : components) names.push_back(c.name);
  return names;
}

std::vector<Type> component_types(const std::vector<Component> &components) {
  std::vector<Type> types;
  for (const Component &c : components) types.push_back(c.type);
  return types;
}

VectorFunction::VectorFunction(Arithmetic arithmetic, const std::vector<std::string> &parameters,
                               const std::vector<Expr> &results)
    : arity_(static_cast<int>(parameters.size())) {
  ExprCompiler compiler(arithmetic);
  for (const std::string &name : parameters) parameter_slots_.push_back(compiler.slot(name));
  for (const Expr &e : results) results_.push_back(compiler.compile(e));
  slots_.assign(compiler.num_slots(), 0);
}

Values VectorFunction::operator()(const Values &arguments) const {
  TWIST_CHECK(static_cast<int>(arguments.size()) == arity_, "{} argument(s) passed to a function of {}",
              arguments.size(), arity_);
  for (size_t k = 0; k < arguments.size(); ++k) slots_[parameter_slots_[k]] = arguments[k];
  Values out;
  out.reserve(results_.size());
  for (const CompiledExpr &r : results_) out.push_back(r(slots_));
  return out;
}

MonoidEvaluator::MonoidEvaluator(const Monoid &monoid, Arithmetic arithmetic)
    : monoid_(monoid), arithmetic_(arithmetic) {
  identity_ = VectorFunction(arithmetic, {}, monoid.identity)({});
  lift_ = VectorFunction(arithmetic, variable_names(monoid.element()), monoid.lift);
  combine_ = VectorFunction(arithmetic, joined(variable_names(monoid.lhs()), variable_names(monoid.rhs())),
                            monoid.combine);
  finalize_ = VectorFunction(arithmetic, variable_names(monoid.one()), monoid.finalize);
  if (!monoid.step.empty())
    step_ = VectorFunction(arithmetic, joined(variable_names(monoid.one()), variable_names(monoid.element())),
                           monoid.step);
}

Values MonoidEvaluator::step(const Values &state, const Values &element) const {
  TWIST_CHECK(has_step(), "monoid '{}' has no step", monoid_.name);
  return step_(joined(state, element));
}

Values MonoidEvaluator::step_fold(std::span<const Values> elements) const {
  Values state = identity_;
  for (const Values &x : elements) state = step(state, x);
  return state;
}

Values MonoidEvaluator::combine(const Values &a, const Values &b) const {
  Values ab = a;
  ab.insert(ab.end(), b.begin(), b.end());
  return combine_(ab);
}

Values MonoidEvaluator::fold(std::span<const Values> elements) const {
  Values state = identity_;
  for (const Values &x : elements) state = combine(state, lift(x));
  return state;
}

}  // namespace twist::algebra
