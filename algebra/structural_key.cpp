#include "algebra/structural_key.h"

#include <cstring>
#include <map>
#include <sstream>

namespace twist::algebra {

using namespace Halide::Internal;

namespace {

// Renames the variables of the given states to positional names ("a.0") and spells every floating-point
// constant by its bits, so that Halide's printer (which prints floats to six digits) cannot merge two
// different constants.
class Canonicalize : public IRMutator {
 public:
  void rename(const std::string &prefix, const std::vector<Component> &components, const std::string &to) {
    for (size_t k = 0; k < components.size(); ++k)
      names_[prefix + components[k].name] = fmt::format("{}{}", to, k);
  }

  using IRMutator::visit;
  Halide::Expr visit(const Variable *v) override {
    auto it = names_.find(v->name);
    if (it == names_.end()) return v;
    return Variable::make(v->type, it->second);
  }
  Halide::Expr visit(const FloatImm *f) override {
    uint64_t bits;
    std::memcpy(&bits, &f->value, sizeof bits);
    return Variable::make(f->type, fmt::format("float{}:{:016x}", f->type.bits(), bits));
  }

 private:
  std::map<std::string, std::string> names_;
};

std::string spell(Canonicalize &canon, const char *part, const std::vector<Expr> &exprs) {
  std::ostringstream out;
  out << part << "[";
  for (const Expr &e : exprs) out << (e.defined() ? Halide::Expr(canon.mutate(e)) : Halide::Expr()) << "; ";
  out << "]\n";
  return out.str();
}

std::string spell_types(const char *part, const std::vector<Component> &components) {
  std::string s = fmt::format("{}(", part);
  for (const Component &c : components) s += type_name(c.type) + " ";
  return s + ")\n";
}

// The same canonical spelling for the expressions of a twist (its base, psi and psi^-1).
std::string twist_key(const Monoid::Twist &twist, const std::vector<Component> &state) {
  Canonicalize canon;
  canon.rename("s.", state, "s.");
  std::string key = "to_base " + spell(canon, "", twist.to_base);
  Canonicalize inverse;
  inverse.rename("s.", twist.base->state, "s.");
  key += "from_base " + spell(inverse, "", twist.from_base);
  return key + "base {\n" + structural_key(*twist.base) + "}\n";
}

}  // namespace

std::string structural_key(const Monoid &m) {
  Canonicalize canon;
  canon.rename("a.", m.state, "a.");
  canon.rename("b.", m.state, "b.");
  canon.rename("x.", m.elements, "x.");
  std::string key = spell_types("state", m.state) + spell_types("elements", m.elements);
  key += spell(canon, "identity", m.identity) + spell(canon, "combine", m.combine) +
         spell(canon, "lift", m.lift);
  if (!m.step.empty()) {
    Canonicalize step_canon;
    step_canon.rename("s.", m.state, "s.");
    step_canon.rename("x.", m.elements, "x.");
    key += spell(step_canon, "step", m.step);
  }
  for (size_t k = 0; k < m.element_domains.size(); ++k)
    key += "domain " + m.element_domains[k].to_string(fmt::format("x{}", k)) + "\n";
  for (const auto &[name, d] : m.parameter_domains) key += "param domain " + d.to_string(name) + "\n";
  key += fmt::format("origin {}\n", static_cast<int>(m.origin));
  for (const auto &factor : m.factors) key += "factor {\n" + structural_key(*factor) + "}\n";
  if (m.twist) key += "twist {\n" + twist_key(*m.twist, m.state) + "}\n";
  return key;
}

}  // namespace twist::algebra
