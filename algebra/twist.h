#pragma once
// Twisted monoids: transport of structure.
//
// A plainly associative base monoid B (componentwise max and +, say) and a bijection psi from a carrier S
// onto B's carrier define a monoid on S whose combine is derived, not written:
//     combine(a, b) = psi^-1(psi(a) (+)_B psi(b)).
// It is associative because psi carries it onto B: (a.b).c = psi^-1(psi(a) + psi(b) + psi(c)) = a.(b.c).
//
// With a reference, psi(s; r) and psi^-1(b; r) are families of bijections indexed by r, and the combine
// uses an r chosen by a rule over the two operands. Softmax: psi(m, l; r) = (m, l*e^(m-r)), and the rule
// r = max(a.m, b.m) is what turns l1*e^m1 + l2*e^m2 into the safe l1*e^(m1-m) + l2*e^(m2-m). Such a
// combine is associative by construction only if its result does not depend on r (then it equals the
// transport through psi(.; r0) for one fixed r0); the checker tests that at random r
// (algebra/check.h).
//
// The twist is recorded in Monoid::Twist: to_base is psi over "s.<name>" and the variable "ref", from_base
// is psi^-1 over "s.<base name>" and "ref". The rule is recorded in algebra/provenance.h.
#include <functional>
#include <memory>
#include <optional>

#include "lang/monoid.h"

namespace twist::algebra {

// The name of the reference variable in a twist's expressions.
inline constexpr const char *kReferenceName = "ref";
Expr reference_variable(const Type &t);

// Builds a twisted monoid in the manner of MonoidBuilder:
//   Monoid softmax = TwistBuilder("softmax", product({max(f32), sum(f32)}, {"m", "l"}))
//       .state({{"m", f32}, {"l", f32}}).elements({{"s", f32}})
//       .identity({neg_infinity(f32), 0.0f})
//       .lift([](const State &x) { ... })
//       .reference(f32, [](const State &a, const State &b) { return max(a["m"], b["m"]); })
//       .to_base([](const State &s, const Expr &ref) { return std::vector<Expr>{s["m"], s["l"] * exp(s["m"] -
//       ref)}; }) .from_base([](const State &b, const Expr &ref) { return std::vector<Expr>{b["m"], b["l"] *
//       exp(ref - b["m"])}; }) .build();
// Without reference(), `ref` is an undefined Expr and psi is a single bijection.
class TwistBuilder {
 public:
  using Fn1 = MonoidBuilder::Fn1;
  using WithReference = std::function<std::vector<Expr>(const State &, const Expr &ref)>;
  using Rule = std::function<Expr(const State &a, const State &b)>;

  TwistBuilder(std::string name, const Monoid &base);
  TwistBuilder &state(std::vector<Component> components);
  TwistBuilder &elements(std::vector<Component> components);
  TwistBuilder &identity(std::vector<Expr> values);
  TwistBuilder &lift(const Fn1 &fn);
  TwistBuilder &finalize(std::vector<Component> outputs, const Fn1 &fn);
  // psi: the base state of a state s ("s.<name>"), relative to the reference if there is one.
  TwistBuilder &to_base(const WithReference &psi);
  // psi^-1: the state of a base state b ("s.<base name>"), relative to the reference if there is one.
  TwistBuilder &from_base(const WithReference &psi_inverse);
  // A reference of type t, chosen by `rule` from the operands of a combine.
  TwistBuilder &reference(const Type &t, const Rule &rule);
  // Restricts an element component or a Param the maps read, as MonoidBuilder::domain does.
  TwistBuilder &domain(const std::string &name, Domain domain);
  Monoid build() const;

 private:
  std::string name_;
  std::shared_ptr<const Monoid> base_;
  std::vector<Component> state_, elements_, outputs_;
  std::vector<Expr> identity_;
  Fn1 lift_, finalize_;
  WithReference to_base_, from_base_;
  std::optional<Type> reference_type_;
  Rule rule_;
  std::vector<std::pair<std::string, Domain>> domains_;
};

// Whether a twist's psi or psi^-1 depends on a reference, and its type.
std::optional<Type> reference_type(const Monoid::Twist &twist);

// The combine a twist defines with the reference r given (an expression over "a.<name>", "b.<name>"),
// psi^-1(psi(a; r) (+)_B psi(b; r); r), unsimplified. The r-independence test compares it, at random r,
// with the combine the monoid actually has.
std::vector<Expr> transported_combine(const Monoid &m, const Monoid::Twist &twist, const Expr &r);

}  // namespace twist::algebra
