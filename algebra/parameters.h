#pragma once
// Monoids that read run-time Params (Monoid::parameters), such as the temperature of a softmax. Z3 asks
// their laws for every value of the Params (algebra/smt_proof.h treats them as unknowns, inside their
// declared domains); the other levels check the monoid at sampled values, each an ordinary monoid with the
// Params replaced by constants.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lang/monoid.h"

namespace twist::algebra {

using ParameterValues = std::map<std::string, double>;

// m with each Param replaced by its value (rounded to the Param's type) in every expression, in its twist
// and its base, and in its factors.
Monoid with_parameter_values(const Monoid &m, const ParameterValues &values);

// `count` assignments of m's Params inside their declared domains: the first 1 (or the domain's nearest
// value) for each, the rest drawn as the checker draws moderate elements (algebra/random_elements.h).
std::vector<ParameterValues> parameter_samples(const Monoid &m, int count, uint64_t seed);

std::string to_string(const ParameterValues &values);  // "temperature = 0.5, k = 3"

}  // namespace twist::algebra
