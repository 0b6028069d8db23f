#pragma once
// Random elements for the checker, the error analysis and the tests, always from a fixed seed.
//
// A list is drawn in one of a few regimes, because the states where a combine goes wrong are rarely the
// ones plain random numbers reach: repeated values (ties of a max, repeated maxima of a softmax), signed
// zeros, -inf (masked scores), and the extremes of the type (huge and tiny magnitudes, infinities, the
// integer limits), where a combine that is right on small values goes wrong. Every value is representable
// in its component's type and lies in the component's declared domain (lang/monoid.h, Domain).
#include <random>
#include <vector>

#include "algebra/monoid_evaluator.h"

namespace twist::algebra {

using Rng = std::mt19937_64;

enum class Regime {
  spread,    // normal values over a few binades; integers in [-50, 50]
  ties,      // values from a small set, signed zeros included; integers in [0, 4]
  masked,    // like spread, but the first floating-point component (the score, by convention) is -inf
             // with probability 1/3, and in one list in four always
  extremes,  // floating point at one magnitude per list, the type's smallest subnormals or its largest
             // finite values, with infinities and signed zeros; half of the integers anywhere in their
             // type, its limits and 0 and +-1 on purpose
};

class ElementSampler {
 public:
  // `domains`: one per component, or none (every value of the types).
  explicit ElementSampler(std::vector<Component> components, std::vector<Domain> domains = {})
      : components_(std::move(components)), domains_(std::move(domains)) {}

  Values element(Rng &rng, Regime regime) const;
  std::vector<Values> list(Rng &rng, int length, Regime regime) const;
  // The same, with the extreme floating-point values at magnitude 2^scale (see Regime::extremes).
  Values element(Rng &rng, Regime regime, int scale) const;
  std::vector<Values> list(Rng &rng, int length, Regime regime, int scale) const;
  // The binade of a list's extreme values: the type's smallest subnormals or its largest values, half
  // of the time each.
  int extreme_scale(Rng &rng) const;
  // A regime drawn at random: spread 3 times in 8, ties and extremes a quarter each, and (where a
  // component is floating point) masked 1 time in 8 instead of one of the spread ones.
  Regime any_regime(Rng &rng) const;

 private:
  Values draw(Rng &rng, Regime regime, bool mask_always, int scale) const;
  Real in_domain(Rng &rng, size_t k, Real value) const;
  std::vector<Component> components_;
  std::vector<Domain> domains_;
};

}  // namespace twist::algebra
