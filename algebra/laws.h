#pragma once
// The randomized tests of the checker (levels 1 and 3): the monoid laws on random reachable states, and
// the premises of a twist's construction. Used by algebra/check.cpp and algebra/derive.cpp.
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>

#include "algebra/check.h"
#include "algebra/random_elements.h"
#include "algebra/tolerance.h"

namespace twist::algebra {

struct LawResult {
  Law law;
  int conclusive = 0, inconclusive = 0;
  std::optional<Counterexample> counterexample = {};
  // Passed: no counterexample, and enough instances were conclusive to mean something.
  bool passed(int trials) const { return !counterexample && conclusive >= std::max(1, trials / 4); }
  std::string summary() const;  // "associativity: 250 instances agree, 6 inconclusive"
};

// One law instance: its inputs. The monoid's states and elements, where a list is split, a reference, and
// states of a twist's base.
struct Instance {
  std::vector<Values> states = {};
  std::vector<Values> elements = {};
  int split = -1;
  std::optional<Real> reference = {};
  std::vector<Values> base_states = {};
};
// One side of a law: a computation on an instance's inputs, run in each arithmetic (and at nearby
// inputs, see Evaluated in algebra/tolerance.h).
using Side = std::function<Values(const MonoidEvaluator &, const Instance &)>;

class LawTester {
 public:
  // Compiles the monoid for extended and exact arithmetic and draws the reachable states: lifts of single
  // elements, and folds of random lists (short ones, and some as long as CheckOptions::fold_lengths or
  // into the thousands) of elements from every regime of algebra/random_elements.h, in their domains. Throws
  // twist::Error if the monoid's expressions cannot be evaluated.
  LawTester(const Monoid &m, const CheckOptions &options);

  // Level 4: associativity, left and right identity, the homomorphism law, leftward == rightward fold;
  // with the user's step (Monoid::step), its fold's homomorphism law and its equality with the rightward
  // fold by the combine.
  std::vector<LawResult> monoid_laws();
  LawResult identity_law(Law which);
  // a . b == b . a on pairs of reachable states of one magnitude (CheckOptions::trials instances).
  LawResult commutativity_law();
  // The laws of the user's step (Monoid::step): its fold's homomorphism law and leftward == rightward.
  std::vector<LawResult> user_step_laws();
  // One instance of associativity, commutativity, an identity law or the user fold's homomorphism, given
  // rather than drawn
  // (a candidate counterexample of the SMT level): its counterexample is set only if the evaluator confirms
  // the disagreement.
  LawResult check(Law law, const Instance &instance);
  // Level 1, for a twist: the combine is the transport at random references (r-independence), psi is a
  // bijection both ways on reachable states, and psi maps the identity to the base's.
  std::vector<LawResult> twist_premises();

  // Runs one law: `draw(rng)` draws an instance and its two sides, which are compared (see compare()
  // for `infinities_are_evidence`).
  LawResult run(Law law, const std::vector<std::string> &side_names, const std::vector<Type> &side_types,
                const std::function<std::tuple<Instance, Side, Side>(Rng &)> &draw,
                bool infinities_are_evidence = false);

  const std::vector<Values> &reachable_states() const { return states_; }

 private:
  // The two sides of associativity (on states a, b, c), commutativity (a, b) or an identity law (a).
  static std::pair<Side, Side> state_law_sides(Law law);
  // The two sides of a law of the user's fold (on a list of elements, split for the homomorphism).
  static std::pair<Side, Side> sequence_law_sides(Law law);
  Values random_state(Rng &rng) const;
  // States of one magnitude: folds of moderate values, or of extreme values at one scale. States of
  // wildly different magnitudes would cancel exactly in one grouping and not in the other (tiny +
  // (-1.5 + 1.5)), in extended as in double, which is rounding that no tolerance can tell from a
  // counterexample.
  std::vector<Values> random_states(Rng &rng, int count) const;
  // A state folded from a short list without extreme values. A twist's premises are identities of exact
  // maps tested in floating point; at a reference of 1e200 they would measure only cancellation.
  Values moderate_state(Rng &rng) const;
  // What compare() in algebra/tolerance.h needs to know of an instance's inputs.
  Real input_magnitude(const Instance &instance) const;
  bool nan_is_evidence(const Instance &instance) const;
  Instance nearby_instance(const Instance &instance, uint64_t &seed) const;
  // Mostly short (up to max_list_length, twice that for a list that is split), sometimes as long as a
  // schedule folds.
  std::vector<Values> random_list(Rng &rng) const;
  int list_length(Rng &rng, int max_short_length) const;

  Monoid monoid_;
  CheckOptions options_;
  MonoidEvaluator extended_, exact_;
  ElementSampler sampler_;
  std::vector<Values> states_;
  // Indices into states_: by magnitude (the scale of extreme values, or kModerate), and the moderate
  // states folded from short lists.
  static constexpr int kModerate = std::numeric_limits<int>::min();
  std::map<int, std::vector<int>> magnitudes_;
  std::vector<int> moderate_states_;
  Rng rng_;
};

}  // namespace twist::algebra
