#include "algebra/random_elements.h"

#include <cmath>
#include <limits>

#include "lang/float_formats.h"

namespace twist::algebra {

namespace {

Real draw_float(Rng& rng, const Type& t, Regime regime) {
  if (regime == Regime::ties) {
    static const double values[] = {-2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0};
    return values[std::uniform_int_distribution<int>(0, 7)(rng)];
  }
  const double binade = std::ldexp(1.0, std::uniform_int_distribution<int>(-2, 2)(rng));
  return round_to_type(t, std::normal_distribution<double>(0.0, 1.0)(rng) * binade);
}

Real draw_integer(Rng& rng, const Type& t, Regime regime) {
  if (t.is_bool()) return std::uniform_int_distribution<int>(0, 1)(rng);
  return regime == Regime::ties ? std::uniform_int_distribution<int>(0, 4)(rng)
                                : std::uniform_int_distribution<int>(-50, 50)(rng);
}

}  // namespace

Values ElementSampler::element(Rng& rng, Regime regime) const {
  return draw(rng, regime, false);
}

Values ElementSampler::draw(Rng& rng, Regime regime, bool mask_always) const {
  Values x;
  bool first_float = true;
  for (const Component& c : components_) {
    if (!c.type.is_float()) {
      x.push_back(draw_integer(rng, c.type, regime));
      continue;
    }
    const bool mask = regime == Regime::masked && first_float &&
                      (mask_always || std::uniform_int_distribution<int>(0, 2)(rng) == 0);
    x.push_back(mask ? -std::numeric_limits<Real>::infinity() : draw_float(rng, c.type, regime));
    first_float = false;
  }
  return x;
}

std::vector<Values> ElementSampler::list(Rng& rng, int length, Regime regime) const {
  const bool mask_always = regime == Regime::masked && std::uniform_int_distribution<int>(0, 3)(rng) == 0;
  std::vector<Values> out;
  for (int i = 0; i < length; ++i) out.push_back(draw(rng, regime, mask_always));
  return out;
}

Regime ElementSampler::any_regime(Rng& rng) const {
  bool has_float = false;
  for (const Component& c : components_) has_float |= c.type.is_float();
  const int k = std::uniform_int_distribution<int>(0, 3)(rng);
  if (k == 3 && has_float) return Regime::masked;
  return k == 2 ? Regime::ties : Regime::spread;
}

}  // namespace twist::algebra
