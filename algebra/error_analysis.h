#pragma once
// Error analysis of a reduction's summation order: how far the typed evaluation (an f16 or f32 state, as a
// kernel would keep it) lands from an extended-precision reference, for a given fold order.
#include <cstdint>
#include <functional>

#include "algebra/fold_order.h"
#include "algebra/random_elements.h"

namespace twist::algebra {

struct ErrorExperiment {
  int length = 1024;  // elements per trial
  int trials = 16;
  uint64_t seed = 1;
  Arithmetic arithmetic = Arithmetic::typed;  // the evaluation measured
  // The elements of one trial; by default spread-regime random elements of the monoid's element types.
  std::function<std::vector<Values>(Rng &, int length)> elements;
};

struct ErrorStatistics {
  double mean = 0;            // of the relative forward error per trial
  double standard_error = 0;  // of that mean (0 for a single trial)
  int trials = 0;
};

// The relative forward error ||y - y_ref|| / ||y_ref|| (Euclidean over the finalized outputs; absolute when
// y_ref is 0) of the fold in `order` evaluated in experiment.arithmetic, where y_ref is the sequential
// fold in extended arithmetic of the same elements.
ErrorStatistics forward_error(const Monoid &m, const FoldOrder &order,
                              const ErrorExperiment &experiment = {});

}  // namespace twist::algebra
