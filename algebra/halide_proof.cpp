#include "algebra/halide_proof.h"

#include <sstream>

#include "algebra/substitution.h"

namespace twist::algebra {

using namespace Halide::Internal;

std::optional<HalideProof> prove_with_halide(const Monoid &m) {
  // The combine becomes the update definition f(x) = combine(f(x), g(x)): a.k is the self-reference
  // f(x)[k] and b.k the other operand g(x)[k].
  const Expr x = variable(i32, "twist.x");
  const std::string self = "twist.self", other = "twist.other";
  std::vector<Expr> f_calls, g_calls;
  for (size_t k = 0; k < m.state.size(); ++k) {
    const Type &t = m.state[k].type;
    f_calls.push_back(Expr(Call::make(t, self, {x}, Call::Halide, FunctionPtr(), static_cast<int>(k))));
    g_calls.push_back(Expr(Call::make(t, other, {x}, Call::Halide, FunctionPtr(), static_cast<int>(k))));
  }
  const std::vector<Expr> update = Substitution().bind(m.lhs(), f_calls).bind(m.rhs(), g_calls)(m.combine);
  AssociativeOp op;
  try {
    op = prove_associativity(self, {x}, std::vector<Halide::Expr>(update.begin(), update.end()));
  } catch (const std::exception &) {
    return std::nullopt;  // Halide could not analyse the expression: not proved here
  }
  if (!op.associative()) return std::nullopt;
  // Halide proves that x (op) Y is associative where Y is the part of the update that does not depend on
  // f. Our combine is that operator only if Y is exactly the other operand: f(x) = f(x) + 2*g(x) matches
  // x + y with y = 2*g(x), but a + 2b is not associative. Likewise the self-reference must be f(x)[k].
  for (size_t k = 0; k < m.state.size(); ++k) {
    if (!op.ys[k].expr.defined() || !equal(op.ys[k].expr, g_calls[k])) return std::nullopt;
    if (op.xs[k].expr.defined() && !equal(op.xs[k].expr, f_calls[k])) return std::nullopt;
  }
  HalideProof proof{"", true};
  std::ostringstream pattern;
  for (size_t k = 0; k < m.state.size(); ++k) {
    pattern << (k ? ", " : "") << op.pattern.ops[k];
    const Halide::Expr id = simplify(cast(m.state[k].type, op.pattern.identities[k]));
    proof.identity_matches &= is_const(id) && can_prove(id == m.identity[k]);
  }
  proof.pattern = pattern.str();
  return proof;
}

}  // namespace twist::algebra
