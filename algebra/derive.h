#pragma once
// Level 5 of the checker: a monoid derived from a leftward fold.
//
// A reduction is often written as a loop, state = step(state, x), rather than as a combine. Bird's third
// homomorphism theorem says the fold is a list homomorphism exactly when it is also a rightward fold, and
// its constructive form builds the combine from a weak right inverse g of the fold h (h(g(s)) == s on
// every state h reaches): s . t = h(g(s) ++ g(t)). Two derivations are supported:
// - a step that is affine in the state, step(s, x) = A(x) s + c(x): the fold is a composition of affine
//   maps, so the monoid is the affine monoid (algebra/builtins.h) with lift x -> (A(x), c(x)) and
//   finalize (A, c) -> A s0 + c;
// - a step with a weak right inverse given by the user: the combine folds g(s) ++ g(t) from the initial
//   state;
// - a step given with the user's own combine (LeftFold::combine, or a monoid's step through left_fold()):
//   the combine is the user's, lifted by step(initial, x), and held to the step.
// The derived monoid (Origin::derived) is then checked like any other, and its fold is tested against the
// given one on random lists.
#include <optional>

#include "algebra/check.h"

namespace twist::algebra {

struct LeftFold {
  std::string name;
  std::vector<Component> state, elements;
  std::vector<Expr> initial;  // the state before any element: constants
  std::vector<Expr> step;     // the next state, over "s.<name>" and "x.<name>"
  // A weak right inverse, if known: a short list of elements, each element one expression per element
  // component over "s.<name>".
  std::vector<std::vector<Expr>> weak_right_inverse;
  // The user's combine, if given: one expression per state component over "a.<name>" and "b.<name>". The
  // derivation takes it instead of deriving one, and checks it against the step.
  std::vector<Expr> combine = {};

  State current() const { return State("s.", state); }
  State lhs() const { return State("a.", state); }
  State rhs() const { return State("b.", state); }
  State element() const { return State("x.", elements); }
};

struct Derivation {
  std::optional<Monoid> monoid;  // absent when no derivation applies
  Verdict verdict;               // Level::derived; its notes include the derived monoid's own verdict
};

Derivation derive_monoid(const LeftFold &fold, const CheckOptions &options = {});

// The fold of a monoid's own step (Monoid::step) with its combine: the identity as the initial state, so that
// derive_monoid checks the user's combine against the user's step. Throws twist::Error without a step.
LeftFold left_fold(const Monoid &m);

}  // namespace twist::algebra
