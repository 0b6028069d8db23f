#include "algebra/substitution.h"

#include "lang/error.h"

namespace twist::algebra {

using namespace Halide::Internal;

Substitution& Substitution::bind(const State& vars, const std::vector<Expr>& values) {
  TWIST_CHECK(static_cast<int>(values.size()) == vars.size(), "binding {} value(s) to a state of {}",
              values.size(), vars.size());
  for (int k = 0; k < vars.size(); ++k) bind(vars[k].as<Variable>()->name, values[k]);
  return *this;
}

Substitution& Substitution::bind(const std::string& name, const Expr& value) {
  replacements_[name] = value;
  return *this;
}

Expr Substitution::operator()(const Expr& e) const {
  return Expr(substitute(replacements_, e));
}

std::vector<Expr> Substitution::operator()(const std::vector<Expr>& es) const {
  std::vector<Expr> out;
  for (const Expr& e : es) out.push_back((*this)(e));
  return out;
}

Expr variable(const Type& t, const std::string& name) {
  return Expr(Variable::make(t, name));
}

bool uses_variable(const Expr& e, const std::string& name) {
  return expr_uses_var(e, name);
}

std::vector<Expr> simplified(const std::vector<Expr>& es) {
  std::vector<Expr> out;
  for (const Expr& e : es) out.push_back(Expr(simplify(e)));
  return out;
}

}  // namespace twist::algebra
