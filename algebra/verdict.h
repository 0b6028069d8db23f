#pragma once
// What the associativity checker decided about a monoid, and why.
#include <optional>
#include <string>
#include <vector>

#include "algebra/monoid_evaluator.h"

namespace twist::algebra {

// The level that decided (DESIGN.md, "Checking associativity").
enum class Level {
  construction = 1,  // proved by construction: built in, a product of proved factors, or a twist
  halide = 2,        // proved by Halide's prove_associativity (its pattern table)
  smt = 3,           // proved by Z3 over every state (or refuted on lifts, confirmed by evaluation)
  tested = 4,        // the laws tested on random reachable states (or refuted there)
  derived = 5,       // the combine derived from a leftward fold, then checked
  user_override,     // not checked: the user asserted associativity (algebra/legality.h)
};
std::string level_name(Level level);  // "proved by construction", ...

// The law a counterexample violates.
enum class Law {
  associativity,       // (a . b) . c == a . (b . c)
  left_identity,       // e . a == a
  right_identity,      // a . e == a
  homomorphism,        // fold(x ++ y) == fold(x) . fold(y)
  fold_directions,     // leftward fold == rightward fold
  transport,           // combine(a, b) == psi^-1(psi(a; r) + psi(b; r); r), at a reference r of our choosing
  state_round_trip,    // psi^-1(psi(s; r); r) == s
  base_round_trip,     // psi(psi^-1(B; r); r) == B
  base_identity,       // psi(e; r) == the base's identity
  fold_agreement,      // a derived monoid's fold == the user's leftward fold
  weak_right_inverse,  // h(g(s)) == s
  affine_step,         // step(s, x) == A(x) s + c(x)
  user_homomorphism,   // the user's fold: fold(x ++ y) == fold(x) . fold(y)
  user_fold_directions,  // the user's fold == the rightward fold by the combine
  user_step,             // step(s, x) == s . step(e, x), for every state (the SMT level's sufficient form)
  commutativity,         // a . b == b . a
};
std::string law_statement(Law law);

struct Counterexample {
  Law law;
  std::string monoid;
  // The inputs: the states a, b, c (by law) with their component names, a list of elements and where it
  // was split, a reference.
  std::vector<std::string> state_names, element_names;
  std::vector<Values> states;
  std::vector<Values> elements;
  int split = -1;
  std::optional<Real> reference;
  std::vector<std::pair<std::string, Real>> parameters;  // the values of the monoid's Params, if it reads any
  // The two sides, evaluated in extended precision, and the component that differs most.
  std::vector<std::string> side_names;
  Values lhs, rhs;
  int component = 0;
  Real difference = 0, tolerance = 0;

  std::string to_string() const;  // several lines
};

struct Verdict {
  bool accepted = false;
  Level level = Level::tested;
  std::string monoid;
  std::string reason;              // one line
  std::vector<std::string> notes;  // what each level found, in the order they ran
  std::optional<Counterexample> counterexample;
  std::string property = "associative";  // what was decided: "associative" or "commutative"

  std::string to_string() const;  // several lines: the decision, the notes, the counterexample
};

}  // namespace twist::algebra
