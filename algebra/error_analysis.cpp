#include "algebra/error_analysis.h"

#include <cmath>

#include "lang/error.h"

namespace twist::algebra {

ErrorStatistics forward_error(const Monoid &m, const FoldOrder &order, const ErrorExperiment &experiment) {
  if (experiment.trials < 1 || experiment.length < 0)
    fail("forward_error of '{}': needs at least one trial and a length of at least 0 (got {} and {})", m.name,
         experiment.trials, experiment.length);
  const MonoidEvaluator measured(m, experiment.arithmetic), reference(m, Arithmetic::extended);
  const ElementSampler sampler(m.elements);
  Rng rng(experiment.seed);
  std::vector<double> errors;
  for (int trial = 0; trial < experiment.trials; ++trial) {
    const std::vector<Values> x = experiment.elements ? experiment.elements(rng, experiment.length)
                                                      : sampler.list(rng, experiment.length, Regime::spread);
    const Values y = measured.finalize(fold_in_order(measured, x, order));
    const Values y_ref = reference.finalize(reference.fold(x));
    Real difference = 0, magnitude = 0;
    for (size_t k = 0; k < y.size(); ++k) {
      difference += (y[k] - y_ref[k]) * (y[k] - y_ref[k]);
      magnitude += y_ref[k] * y_ref[k];
    }
    errors.push_back(
        static_cast<double>(magnitude > 0 ? std::sqrt(difference / magnitude) : std::sqrt(difference)));
  }
  ErrorStatistics stats;
  stats.trials = static_cast<int>(errors.size());
  for (double e : errors) stats.mean += e / stats.trials;
  if (stats.trials > 1) {
    double variance = 0;
    for (double e : errors) variance += (e - stats.mean) * (e - stats.mean) / (stats.trials - 1);
    stats.standard_error = std::sqrt(variance / stats.trials);
  }
  return stats;
}

}  // namespace twist::algebra
