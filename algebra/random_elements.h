#pragma once
// Random elements for the checker, the error analysis and the tests, always from a fixed seed.
//
// A list is drawn in one of a few regimes, because the states where a combine goes wrong are rarely the
// ones plain random numbers reach: repeated values (ties of a max, repeated maxima of a softmax), signed
// zeros, and -inf (masked scores). Every value is representable in its component's type.
#include <random>
#include <vector>

#include "algebra/monoid_evaluator.h"

namespace twist::algebra {

using Rng = std::mt19937_64;

enum class Regime {
  spread,  // normal values over a few binades; integers in [-50, 50]
  ties,    // values from a small set, signed zeros included; integers in [0, 4]
  masked,  // like spread, but the first floating-point component (the score, by convention) is -inf
           // with probability 1/3, and in one list in four always
};

class ElementSampler {
 public:
  explicit ElementSampler(std::vector<Component> components) : components_(std::move(components)) {}

  Values element(Rng& rng, Regime regime) const;
  std::vector<Values> list(Rng& rng, int length, Regime regime) const;
  // A regime drawn at random: spread half of the time, ties and (where a component is floating point)
  // masked a quarter each.
  Regime any_regime(Rng& rng) const;

 private:
  Values draw(Rng& rng, Regime regime, bool mask_always) const;
  std::vector<Component> components_;
};

}  // namespace twist::algebra
