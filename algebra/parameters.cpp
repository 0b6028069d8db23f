#include "algebra/parameters.h"

#include <algorithm>
#include <memory>

#include "algebra/provenance.h"
#include "algebra/random_elements.h"
#include "algebra/substitution.h"
#include "lang/error.h"
#include "lang/float_formats.h"

namespace twist::algebra {

namespace {

Substitution constants_for(const std::vector<Component> &parameters, const ParameterValues &values) {
  Substitution put;
  for (const Component &p : parameters) {
    auto it = values.find(p.name);
    if (it == values.end()) fail("no value for the Param '{}' ({})", p.name, type_name(p.type));
    put.bind(p.name, Expr(Halide::Internal::make_const(p.type, it->second)));
  }
  return put;
}

}  // namespace

Monoid with_parameter_values(const Monoid &m, const ParameterValues &values) {
  const Substitution put = constants_for(m.parameters(), values);
  Monoid out = m;
  out.parameter_domains.clear();
  out.combine = put(m.combine);
  // A twist's combine was simplified when it was built (TwistBuilder::build); simplified again, it holds
  // the constants as a twist built with them would, so that the transport test compares like with like.
  if (m.twist) out.combine = simplified(out.combine);
  out.lift = put(m.lift);
  out.finalize = put(m.finalize);
  out.step = put(m.step);
  if (m.twist) {
    out.twist->to_base = put(m.twist->to_base);
    out.twist->from_base = put(m.twist->from_base);
    out.twist->base = std::make_shared<const Monoid>(with_parameter_values(*m.twist->base, values));
  }
  for (auto &f : out.factors) f = std::make_shared<const Monoid>(with_parameter_values(*f, values));
  if (auto rule = reference_rule(m)) register_reference_rule(out, ReferenceRule{rule->type, put(rule->rule)});
  out.validate();
  return out;
}

std::vector<ParameterValues> parameter_samples(const Monoid &m, int count, uint64_t seed) {
  const std::vector<Component> parameters = m.parameters();
  std::vector<Domain> domains;
  for (const Component &p : parameters) {
    auto it = m.parameter_domains.find(p.name);
    domains.push_back(it == m.parameter_domains.end() ? Domain{} : it->second);
  }
  const ElementSampler sampler(parameters, domains);
  Rng rng(seed);
  std::vector<ParameterValues> samples;
  for (int k = 0; k < count; ++k) {
    const Values drawn = sampler.element(rng, Regime::spread);
    ParameterValues values;
    for (size_t i = 0; i < parameters.size(); ++i) {
      const Domain &d = domains[i];
      double typical = 1.0;
      if (d.hi) typical = std::min(typical, *d.hi);
      if (d.lo) typical = std::max(typical, *d.lo);
      const double value = k == 0 ? typical : static_cast<double>(drawn[i]);
      const Type &t = parameters[i].type;
      values[parameters[i].name] = t.is_float() ? round_to_type(t, value) : value;
    }
    samples.push_back(std::move(values));
  }
  return samples;
}

std::string to_string(const ParameterValues &values) {
  std::string s;
  for (const auto &[name, value] : values) s += fmt::format("{}{} = {}", s.empty() ? "" : ", ", name, value);
  return s;
}

}  // namespace twist::algebra
