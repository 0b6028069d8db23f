#include "algebra/substitution.h"

#include <cmath>

#include "lang/error.h"
#include "lang/evaluate.h"

namespace twist::algebra {

using namespace Halide::Internal;

Substitution &Substitution::bind(const State &vars, const std::vector<Expr> &values) {
  TWIST_CHECK(static_cast<int>(values.size()) == vars.size(), "binding {} value(s) to a state of {}",
              values.size(), vars.size());
  for (int k = 0; k < vars.size(); ++k) bind(vars[k].as<Variable>()->name, values[k]);
  return *this;
}

Substitution &Substitution::bind(const std::string &name, const Expr &value) {
  replacements_[name] = value;
  return *this;
}

Expr Substitution::operator()(const Expr &e) const {
  return Expr(substitute(replacements_, e));
}

std::vector<Expr> Substitution::operator()(const std::vector<Expr> &es) const {
  std::vector<Expr> out;
  for (const Expr &e : es) out.push_back((*this)(e));
  return out;
}

Expr variable(const Type &t, const std::string &name) {
  return Expr(Variable::make(t, name));
}

bool uses_variable(const Expr &e, const std::string &name) {
  return expr_uses_var(e, name);
}

namespace {

class FoldMathAndSelects : public IRMutator {
  using IRMutator::visit;

  Halide::Expr visit(const Call *op) override {
    Halide::Expr e = IRMutator::visit(op);
    const auto *call = e.as<Call>();
    if (!call || !as_math_call(call)) return e;
    for (const Halide::Expr &a : call->args)
      if (!a.as<FloatImm>()) return e;
    // The value exactly, and as the type holds it: folded only where they agree.
    Slots none;
    const Real exact = ExprCompiler(Arithmetic::exact).compile(e)(none);
    const Real typed = ExprCompiler(Arithmetic::typed).compile(e)(none);
    if (!std::isfinite(static_cast<double>(exact)) || exact != typed) return e;
    return FloatImm::make(call->type, static_cast<double>(typed));
  }

  Halide::Expr visit(const Mul *op) override {
    Halide::Expr a = mutate(op->a), b = mutate(op->b);
    const auto *sa = a.as<Select>(), *sb = b.as<Select>();
    if (sa && sb && equal(sa->condition, sb->condition))
      return Select::make(sa->condition, sa->true_value * sb->true_value, sa->false_value * sb->false_value);
    return Mul::make(a, b);
  }
};

// Halide's simplifier needs every Let-bound name to be unique, which a composed expression breaks (a
// transported combine applies psi, Lets and all, inside psi^-1), so the names are made unique first.
Halide::Expr with_unique_let_names(const Halide::Expr &e) {
  return uniquify_variable_names(Evaluate::make(e)).as<Evaluate>()->value;
}

}  // namespace

Halide::Expr simplified(const Halide::Expr &e) {
  return simplify(FoldMathAndSelects().mutate(simplify(with_unique_let_names(e))));
}

std::vector<Expr> simplified(const std::vector<Expr> &es) {
  std::vector<Expr> out;
  for (const Expr &e : es) out.push_back(Expr(simplified(static_cast<const Halide::Expr &>(e))));
  return out;
}

}  // namespace twist::algebra
