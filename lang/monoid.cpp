#include "lang/monoid.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "lang/error.h"
#include "lang/param.h"

namespace twist {

using namespace Halide::Internal;

State::State(std::string prefix, std::vector<Component> components) : components_(std::move(components)) {
  for (const Component &c : components_) vars_.push_back(Expr(Variable::make(c.type, prefix + c.name)));
}

Expr State::operator[](int k) const {
  if (k < 0 || k >= size()) fail("a state of {} component(s) has no component {}", size(), k);
  return vars_[k];
}

Expr State::operator[](const std::string &name) const {
  for (size_t k = 0; k < components_.size(); ++k)
    if (components_[k].name == name) return vars_[k];
  std::string names;
  for (const Component &c : components_) names += (names.empty() ? "" : ", ") + c.name;
  fail("no component named '{}' (the components are {})", name, names);
}

bool Domain::contains(double value) const {
  if (lo && !(value >= *lo)) return false;
  if (hi && !(value <= *hi)) return false;
  return !integral || value == std::floor(value);
}

std::string Domain::to_string(const std::string &component) const {
  auto bound = [](const std::optional<double> &b, const char *unbounded) {
    return b ? fmt::format("{}", *b) : std::string(unbounded);
  };
  return fmt::format("{} in [{}, {}]{}", component, bound(lo, "-inf"), bound(hi, "+inf"),
                     integral ? ", whole numbers" : "");
}

std::set<std::string> free_variables(const Halide::Expr &e) {
  struct Collect : IRVisitor {
    std::set<std::string> names;
    std::multiset<std::string> let_bound;
    using IRVisitor::visit;
    void visit(const Variable *v) override {
      if (!is_param(v) && !let_bound.count(v->name)) names.insert(v->name);
    }
    void visit(const Let *op) override {
      op->value.accept(this);
      auto bound = let_bound.insert(op->name);
      op->body.accept(this);
      let_bound.erase(bound);
    }
  } collect;
  e.accept(&collect);
  return collect.names;
}

std::vector<Component> Monoid::parameters() const {
  struct Collect : IRVisitor {
    std::vector<Component> found;
    using IRVisitor::visit;
    void visit(const Variable *v) override {
      if (is_param(v) &&
          std::none_of(found.begin(), found.end(), [&](const Component &c) { return c.name == v->name; }))
        found.push_back({v->name, v->type});
    }
  } collect;
  for (const auto *part : {&identity, &combine, &lift, &finalize, &step})
    for (const Expr &e : *part)
      if (e.defined()) e.accept(&collect);
  auto add = [&](const std::vector<Component> &more) {
    for (const Component &c : more)
      if (std::none_of(collect.found.begin(), collect.found.end(),
                       [&](const Component &p) { return p.name == c.name; }))
        collect.found.push_back(c);
  };
  if (twist) {
    for (const auto *map : {&twist->to_base, &twist->from_base})
      for (const Expr &e : *map) e.accept(&collect);
    add(twist->base->parameters());
  }
  for (const auto &f : factors) add(f->parameters());
  return collect.found;
}

int Monoid::state_index(const std::string &component) const {
  for (size_t k = 0; k < state.size(); ++k)
    if (state[k].name == component) return static_cast<int>(k);
  fail("monoid '{}' has no state component '{}'", name, component);
}

namespace {

void check_part(const Monoid &m, const char *part, const std::vector<Expr> &exprs,
                const std::vector<Component> &targets, const std::vector<State> &scopes) {
  if (exprs.size() != targets.size())
    fail("monoid '{}': {} gives {} value(s) but {} are needed (one per component: {})", m.name, part,
         exprs.size(), targets.size(), [&] {
           std::string s;
           for (const Component &c : targets) s += (s.empty() ? "" : ", ") + c.name;
           return s;
         }());
  std::set<std::string> allowed;
  for (const State &s : scopes)
    for (const Expr &v : s.vars()) allowed.insert(v.as<Variable>()->name);
  for (size_t k = 0; k < exprs.size(); ++k) {
    const Expr &e = exprs[k];
    if (!e.defined()) fail("monoid '{}': {} of component '{}' is undefined", m.name, part, targets[k].name);
    if (auto err = first_type_error(e))
      fail("monoid '{}': {} of component '{}': {}", m.name, part, targets[k].name, *err);
    if (e.type() != targets[k].type)
      fail("monoid '{}': {} of component '{}' has type {} but the component is {}", m.name, part,
           targets[k].name, type_name(e.type()), type_name(targets[k].type));
    for (const std::string &v : free_variables(e))
      if (!allowed.count(v))
        fail("monoid '{}': {} of component '{}' uses '{}', which is not one of its operands", m.name, part,
             targets[k].name, v);
  }
}

std::vector<Expr> adapt(const std::vector<Expr> &values, const std::vector<Component> &to) {
  std::vector<Expr> out = values;
  for (size_t k = 0; k < out.size() && k < to.size(); ++k) {
    const Expr &v = out[k];
    if (v.defined() && v.type() != to[k].type && (v.as<IntImm>() || v.as<FloatImm>()))
      out[k] = constant(to[k].type, v.as<IntImm>() ? double(v.as<IntImm>()->value) : v.as<FloatImm>()->value,
                        "monoid constant");
  }
  return out;
}

}  // namespace

void Monoid::validate() const {
  if (name.empty()) fail("a monoid needs a name");
  if (state.empty()) fail("monoid '{}' needs at least one state component", name);
  for (const auto *components : {&state, &elements, &outputs}) {
    std::set<std::string> seen;
    for (const Component &c : *components) {
      if (c.name.empty()) fail("monoid '{}' has a component without a name", name);
      if (!seen.insert(c.name).second) fail("monoid '{}' has two components named '{}'", name, c.name);
      if (!is_element_type(c.type) && !c.type.is_bool())
        fail("monoid '{}': component '{}' has type {}, which twist cannot hold", name, c.name,
             type_name(c.type));
    }
  }
  if (!element_domains.empty() && element_domains.size() != elements.size())
    fail("monoid '{}' has {} element domain(s) for {} element component(s)", name, element_domains.size(),
         elements.size());
  for (size_t k = 0; k < element_domains.size(); ++k) {
    const Domain &d = element_domains[k];
    if (d.lo && d.hi && *d.lo > *d.hi)
      fail("monoid '{}': the domain of element '{}' is empty ({})", name, elements[k].name,
           d.to_string(elements[k].name));
    if (!elements[k].type.is_float() && !d.integral && (d.lo || d.hi) &&
        ((d.lo && *d.lo != std::floor(*d.lo)) || (d.hi && *d.hi != std::floor(*d.hi))))
      fail("monoid '{}': element '{}' is an integer, but its domain has fractional bounds ({})", name,
           elements[k].name, d.to_string(elements[k].name));
  }
  if (!parameter_domains.empty()) {
    const std::vector<Component> read = parameters();
    for (const auto &[parameter, d] : parameter_domains) {
      if (std::none_of(read.begin(), read.end(), [&](const Component &p) { return p.name == parameter; }))
        fail("monoid '{}' declares a domain for '{}', which is not a Param its expressions read", name,
             parameter);
      if (d.lo && d.hi && *d.lo > *d.hi)
        fail("monoid '{}': the domain of Param '{}' is empty ({})", name, parameter, d.to_string(parameter));
    }
  }
  check_part(*this, "identity", identity, state, {});
  for (size_t k = 0; k < identity.size(); ++k)
    if (!is_const(identity[k]))
      fail("monoid '{}': the identity of component '{}' must be a constant", name, state[k].name);
  check_part(*this, "combine", combine, state, {lhs(), rhs()});
  check_part(*this, "lift", lift, state, {element()});
  check_part(*this, "finalize", finalize, outputs, {one()});
  if (!step.empty()) check_part(*this, "step", step, state, {one(), element()});
}

MonoidBuilder::MonoidBuilder(std::string name) {
  m_.name = std::move(name);
}

MonoidBuilder &MonoidBuilder::state(std::vector<Component> components) {
  m_.state = std::move(components);
  return *this;
}

MonoidBuilder &MonoidBuilder::elements(std::vector<Component> components) {
  m_.elements = std::move(components);
  has_elements_ = true;
  return *this;
}

MonoidBuilder &MonoidBuilder::domain(const std::string &component, Domain domain) {
  domains_.emplace_back(component, domain);
  return *this;
}

MonoidBuilder &MonoidBuilder::identity(std::vector<Expr> values) {
  m_.identity = std::move(values);
  return *this;
}

MonoidBuilder &MonoidBuilder::combine(const Fn2 &fn) {
  combine_ = fn;
  return *this;
}

MonoidBuilder &MonoidBuilder::lift(const Fn1 &fn) {
  lift_ = fn;
  return *this;
}

MonoidBuilder &MonoidBuilder::finalize(std::vector<Component> outputs, const Fn1 &fn) {
  m_.outputs = std::move(outputs);
  finalize_ = fn;
  has_outputs_ = true;
  return *this;
}

MonoidBuilder &MonoidBuilder::step(const Fn2 &fn) {
  step_ = fn;
  return *this;
}

MonoidBuilder &MonoidBuilder::commutative(bool known) {
  m_.commutative = known;
  return *this;
}

MonoidBuilder &MonoidBuilder::origin(Monoid::Origin origin) {
  m_.origin = origin;
  return *this;
}

Monoid MonoidBuilder::build() const {
  Monoid m = m_;
  if (!combine_) fail("monoid '{}' needs a combine", m.name);
  if (!has_elements_) m.elements = m.state;
  if (!has_outputs_) m.outputs = m.state;
  m.identity = adapt(m.identity, m.state);
  m.combine = adapt(combine_(m.lhs(), m.rhs()), m.state);
  m.lift = lift_ ? adapt(lift_(m.element()), m.state) : m.element().vars();
  m.finalize = finalize_ ? adapt(finalize_(m.one()), m.outputs) : m.one().vars();
  if (step_) m.step = adapt(step_(m.one(), m.element()), m.state);
  if (std::any_of(domains_.begin(), domains_.end(), [&](const auto &d) {
        return std::any_of(m.elements.begin(), m.elements.end(),
                           [&](const Component &c) { return c.name == d.first; });
      }))
    m.element_domains.assign(m.elements.size(), Domain{});
  if (!domains_.empty()) {
    for (const auto &[component, domain] : domains_) {
      auto it = std::find_if(m.elements.begin(), m.elements.end(),
                             [&](const Component &c) { return c.name == component; });
      if (it != m.elements.end()) {
        m.element_domains[it - m.elements.begin()] = domain;
        continue;
      }
      const std::vector<Component> parameters = m.parameters();
      if (std::none_of(parameters.begin(), parameters.end(),
                       [&](const Component &p) { return p.name == component; }))
        fail(
            "monoid '{}': domain() names '{}', which is neither one of its element components nor a Param "
            "its "
            "expressions read",
            m.name, component);
      m.parameter_domains[component] = domain;
    }
  }
  m.validate();
  return m;
}

}  // namespace twist
