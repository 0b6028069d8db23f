#include "algebra/twist.h"

#include <set>

#include "algebra/provenance.h"
#include "algebra/substitution.h"
#include "lang/error.h"

namespace twist::algebra {

using namespace Halide::Internal;

Expr reference_variable(const Type &t) {
  return variable(t, kReferenceName);
}

TwistBuilder::TwistBuilder(std::string name, const Monoid &base)
    : name_(std::move(name)), base_(std::make_shared<const Monoid>(base)) {}

TwistBuilder &TwistBuilder::state(std::vector<Component> components) {
  state_ = std::move(components);
  return *this;
}
TwistBuilder &TwistBuilder::elements(std::vector<Component> components) {
  elements_ = std::move(components);
  return *this;
}
TwistBuilder &TwistBuilder::identity(std::vector<Expr> values) {
  identity_ = std::move(values);
  return *this;
}
TwistBuilder &TwistBuilder::lift(const Fn1 &fn) {
  lift_ = fn;
  return *this;
}
TwistBuilder &TwistBuilder::finalize(std::vector<Component> outputs, const Fn1 &fn) {
  outputs_ = std::move(outputs);
  finalize_ = fn;
  return *this;
}
TwistBuilder &TwistBuilder::to_base(const WithReference &psi) {
  to_base_ = psi;
  return *this;
}
TwistBuilder &TwistBuilder::from_base(const WithReference &psi_inverse) {
  from_base_ = psi_inverse;
  return *this;
}
TwistBuilder &TwistBuilder::reference(const Type &t, const Rule &rule) {
  reference_type_ = t;
  rule_ = rule;
  return *this;
}

namespace {

// Checks one side of the bijection: one expression per target component, of its type, over the allowed
// variables only.
void check_map(const std::string &monoid, const char *what, const std::vector<Expr> &exprs,
               const std::vector<Component> &targets, const State &over, bool has_reference) {
  if (exprs.size() != targets.size())
    fail("twisted monoid '{}': {} gives {} value(s) but {} are needed, one per component", monoid, what,
         exprs.size(), targets.size());
  std::set<std::string> allowed;
  for (const Expr &v : over.vars()) allowed.insert(v.as<Variable>()->name);
  if (has_reference) allowed.insert(kReferenceName);
  for (size_t k = 0; k < exprs.size(); ++k) {
    const Expr &e = exprs[k];
    if (!e.defined())
      fail("twisted monoid '{}': {} of component '{}' is undefined", monoid, what, targets[k].name);
    if (auto err = first_type_error(e))
      fail("twisted monoid '{}': {} of component '{}': {}", monoid, what, targets[k].name, *err);
    if (e.type() != targets[k].type)
      fail("twisted monoid '{}': {} of component '{}' has type {} but the component is {}", monoid, what,
           targets[k].name, type_name(e.type()), type_name(targets[k].type));
    for (const std::string &name : free_variables(e))
      if (!allowed.count(name))
        fail(
            "twisted monoid '{}': {} of component '{}' uses '{}', which is neither a component of its "
            "operand nor the reference{}",
            monoid, what, targets[k].name, name, has_reference ? "" : " (declare one with reference())");
  }
}

}  // namespace

std::optional<Type> reference_type(const Monoid::Twist &twist) {
  struct Find : IRVisitor {
    std::optional<Type> type;
    using IRVisitor::visit;
    void visit(const Variable *v) override {
      if (v->name == kReferenceName) type = v->type;
    }
  } find;
  for (const Expr &e : twist.to_base) e.accept(&find);
  for (const Expr &e : twist.from_base) e.accept(&find);
  return find.type;
}

std::vector<Expr> transported_combine(const Monoid &m, const Monoid::Twist &twist, const Expr &r) {
  const Monoid &base = *twist.base;
  auto psi = [&](const State &s) {
    Substitution sub;
    sub.bind(m.one(), s.vars());
    if (r.defined()) sub.bind(kReferenceName, r);
    return sub(twist.to_base);
  };
  std::vector<Expr> combined =
      Substitution().bind(base.lhs(), psi(m.lhs())).bind(base.rhs(), psi(m.rhs()))(base.combine);
  Substitution inverse;
  inverse.bind(base.one(), combined);
  if (r.defined()) inverse.bind(kReferenceName, r);
  return inverse(twist.from_base);
}

TwistBuilder &TwistBuilder::domain(const std::string &name, Domain domain) {
  domains_.emplace_back(name, domain);
  return *this;
}

Monoid TwistBuilder::build() const {
  if (!to_base_ || !from_base_)
    fail("twisted monoid '{}' needs both to_base (psi) and from_base (psi^-1)", name_);
  if (state_.empty()) fail("twisted monoid '{}' needs a state", name_);
  const bool has_reference = reference_type_.has_value();
  const Expr ref = has_reference ? reference_variable(*reference_type_) : Expr();

  Monoid::Twist twist;
  twist.base = base_;
  const State one("s.", state_);
  twist.to_base = to_base_(one, ref);
  twist.from_base = from_base_(base_->one(), ref);
  check_map(name_, "to_base (psi)", twist.to_base, base_->state, one, has_reference);
  check_map(name_, "from_base (psi^-1)", twist.from_base, state_, base_->one(), has_reference);
  if (has_reference && !reference_type(twist))
    fail("twisted monoid '{}' declares a reference but neither psi nor psi^-1 uses it", name_);

  MonoidBuilder builder(name_);
  // psi carries the combine onto the base's, so it commutes where the base's does.
  builder.state(state_).identity(identity_).origin(Monoid::Origin::twisted).commutative(base_->commutative);
  if (!elements_.empty()) builder.elements(elements_);
  if (lift_) builder.lift(lift_);
  if (finalize_) builder.finalize(outputs_, finalize_);
  // The combine can only be derived once the monoid's own states exist, so a first build supplies them.
  Monoid shape =
      MonoidBuilder(builder).combine([](const State &a, const State &) { return a.vars(); }).build();
  Expr rule;
  if (has_reference) {
    rule = rule_(shape.lhs(), shape.rhs());
    if (!rule.defined() || rule.type() != *reference_type_)
      fail("twisted monoid '{}': the reference rule must give a {} value", name_,
           type_name(*reference_type_));
  }
  const std::vector<Expr> combine = simplified(transported_combine(shape, twist, rule));
  builder.combine([&](const State &, const State &) { return combine; });
  for (const auto &[name, domain] : domains_) builder.domain(name, domain);
  Monoid m = builder.build();
  m.twist = twist;
  if (has_reference) register_reference_rule(m, ReferenceRule{*reference_type_, rule});
  return m;
}

}  // namespace twist::algebra
