#include "scheduler/contraction.h"

namespace twist {

using namespace Halide::Internal;

bool is_plain_sum(const Monoid &m) {
  if (m.state.size() != 1 || m.elements.size() != 1) return false;
  if (!is_const_zero(m.identity[0])) return false;
  const Halide::Expr a = m.lhs()[0], b = m.rhs()[0];
  const Halide::Expr c = simplify(m.combine[0]);
  if (!equal(c, simplify(a + b)) && !equal(c, simplify(b + a))) return false;
  return m.lift[0].type() == m.state[0].type && equal(m.lift[0], m.element()[0]);
}

namespace {

std::optional<ContractionOperand> as_operand(const Halide::Expr &e) {
  Halide::Expr inner = e;
  if (const auto *c = inner.as<Cast>()) inner = c->value;
  const auto *call = inner.as<Call>();
  if (!call || call->call_type != Call::Image) return std::nullopt;
  if (call->type != Halide::Float(16) && call->type != Halide::BFloat(16)) return std::nullopt;
  return ContractionOperand{call->name, call->type, call->args};
}

}  // namespace

std::optional<Contraction> as_contraction(const Monoid &monoid, const std::vector<Expr> &elements) {
  if (!is_plain_sum(monoid) || elements.size() != 1) return std::nullopt;
  const auto *mul = elements[0].as<Mul>();
  if (!mul) return std::nullopt;
  auto a = as_operand(mul->a), b = as_operand(mul->b);
  if (!a || !b || a->type != b->type) return std::nullopt;
  return Contraction{*a, *b};
}

}  // namespace twist
