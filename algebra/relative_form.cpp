#include "algebra/relative_form.h"

#include "algebra/provenance.h"
#include "algebra/substitution.h"
#include "algebra/twist.h"

namespace twist::algebra {

using namespace Halide::Internal;

namespace {

// The operator of base component k if its combine is op(a.k, b.k), in either order.
std::optional<RelativeForm::BaseOp> componentwise_op(const Monoid &base, int k) {
  const Expr &e = base.combine[k];
  const std::string a = base.lhs()[k].as<Variable>()->name, b = base.rhs()[k].as<Variable>()->name;
  auto operands_are = [&](const Halide::Expr &x, const Halide::Expr &y) {
    const Variable *vx = x.as<Variable>(), *vy = y.as<Variable>();
    return vx && vy && ((vx->name == a && vy->name == b) || (vx->name == b && vy->name == a));
  };
  if (const Add *op = e.as<Add>(); op && operands_are(op->a, op->b)) return RelativeForm::BaseOp::add;
  if (const Max *op = e.as<Max>(); op && operands_are(op->a, op->b)) return RelativeForm::BaseOp::max;
  if (const Min *op = e.as<Min>(); op && operands_are(op->a, op->b)) return RelativeForm::BaseOp::min;
  return std::nullopt;
}

std::optional<RelativeForm> none(std::string *why, std::string reason) {
  if (why) *why = std::move(reason);
  return std::nullopt;
}

}  // namespace

std::optional<RelativeForm> relative_form(const Monoid &m, std::string *why) {
  const Monoid &base = m.twist ? *m.twist->base : m;
  RelativeForm form;
  form.monoid = std::make_shared<const Monoid>(m);
  form.base = base.state;
  form.base_identity = base.identity;
  for (int k = 0; k < static_cast<int>(base.state.size()); ++k) {
    auto op = componentwise_op(base, k);
    if (!op)
      return none(why, fmt::format("the {} of '{}' does not combine component '{}' by max, min or +",
                                   m.twist ? "base" : "combine", m.name, base.state[k].name));
    form.ops.push_back(*op);
  }
  const State b = form.base_vars();
  // psi and psi^-1 (the identity maps without a twist), over "s.<name>" and "b.<name>".
  form.from_state = m.twist ? m.twist->to_base : m.one().vars();
  form.to_state = Substitution().bind(base.one(), b.vars())(m.twist ? m.twist->from_base : base.one().vars());

  const std::optional<Type> ref_type = m.twist ? reference_type(*m.twist) : std::nullopt;
  form.has_reference = ref_type.has_value();
  form.relative_lift = simplified(Substitution().bind(m.one(), m.lift)(form.from_state));
  for (size_t k = 0; k < form.ops.size(); ++k)
    if (form.is_selector(static_cast<int>(k)) && form.has_reference &&
        uses_variable(form.from_state[k], kReferenceName))
      return none(
          why, fmt::format("the selector '{}' of '{}' depends on the reference", base.state[k].name, m.name));
  if (!form.has_reference) {
    form.rebase = b.vars();
    return form;
  }

  form.ref_type = *ref_type;
  const auto rule = reference_rule(m);
  if (!rule)
    return none(
        why, fmt::format("the reference rule of '{}' is unknown (build twists with TwistBuilder)", m.name));
  // The reference a state calls for is the rule applied to the state and itself (softmax: max(m, m) = m).
  const std::vector<Expr> state = form.to_state;
  form.reference_of = Expr(simplify(Substitution().bind(m.lhs(), state).bind(m.rhs(), state)(rule->rule)));
  if (const auto *v = form.reference_of.as<Variable>())
    for (int k = 0; k < static_cast<int>(form.base.size()); ++k)
      if (form.is_selector(k) && v->name == b[k].as<Variable>()->name) form.reference_selector = k;
  form.initial_reference =
      Expr(simplify(Substitution()
                        .bind(b, form.base_identity)
                        .bind(kReferenceName, Expr(make_zero(*ref_type)))(form.reference_of)));
  // Rebasing is psi(psi^-1(b; ref.old); ref.new).
  const std::vector<Expr> at_old =
      Substitution().bind(kReferenceName, variable(*ref_type, kOldReferenceName))(state);
  form.rebase =
      simplified(Substitution()
                     .bind(m.one(), at_old)
                     .bind(kReferenceName, variable(*ref_type, kNewReferenceName))(form.from_state));
  return form;
}

}  // namespace twist::algebra
