#include "algebra/random_elements.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "lang/float_formats.h"

namespace twist::algebra {

namespace {

Real draw_float(Rng &rng, const Type &t, Regime regime) {
  if (regime == Regime::ties) {
    static const double values[] = {-2.0, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0};
    return values[std::uniform_int_distribution<int>(0, 7)(rng)];
  }
  const double binade = std::ldexp(1.0, std::uniform_int_distribution<int>(-2, 2)(rng));
  return round_to_type(t, std::normal_distribution<double>(0.0, 1.0)(rng) * binade);
}

bool coin(Rng &rng) {
  return std::uniform_int_distribution<int>(0, 1)(rng) == 1;
}

// The range of binades of a floating-point type, subnormals included.
std::pair<int, int> binades(const Type &t) {
  if (t.bits() == 64) return {-1074, 1023};
  if (t.bits() == 32) return {-149, 127};
  if (t.is_bfloat()) return {-133, 127};
  return {-24, 15};
}

// A value of a floating-point type at magnitude 2^scale (up to 8 times that), or now and then an infinity
// or a signed zero. One list draws its finite values at one scale: values of wildly different magnitudes
// in one list would cancel exactly in one order and not in another (1e38 + 1 - 1e38), in double and in
// extended alike, which is rounding, not a property of the combine.
Real draw_extreme_float(Rng &rng, const Type &t, int scale) {
  const bool negative = coin(rng);
  const int k = std::uniform_int_distribution<int>(0, 15)(rng);
  double magnitude;
  if (k == 0)
    magnitude = std::numeric_limits<double>::infinity();
  else if (k == 1)
    magnitude = 0.0;
  else
    magnitude =
        std::ldexp(std::uniform_real_distribution<double>(1.0, 2.0)(rng),
                   std::min(scale + std::uniform_int_distribution<int>(0, 2)(rng), binades(t).second));
  return round_to_type(t, negative ? -magnitude : magnitude);
}

Real draw_integer(Rng &rng, const Type &t, Regime regime) {
  if (t.is_bool()) return std::uniform_int_distribution<int>(0, 1)(rng);
  if (regime == Regime::extremes && coin(rng)) {
    const Real lo = t.is_int() ? -std::ldexp(Real(1), t.bits() - 1) : Real(0);
    const Real hi = std::ldexp(Real(1), t.is_int() ? t.bits() - 1 : t.bits()) - 1;
    const Real specials[] = {lo, hi, 0, 1, t.is_int() ? Real(-1) : hi - 1};
    const int k = std::uniform_int_distribution<int>(0, 9)(rng);
    if (k < 5) return specials[k];
    return std::floor(std::uniform_real_distribution<long double>(lo, hi + 1)(rng));
  }
  return regime == Regime::ties ? std::uniform_int_distribution<int>(0, 4)(rng)
                                : std::uniform_int_distribution<int>(-50, 50)(rng);
}

}  // namespace

Values ElementSampler::element(Rng &rng, Regime regime) const {
  return element(rng, regime, extreme_scale(rng));
}

Values ElementSampler::element(Rng &rng, Regime regime, int scale) const {
  return draw(rng, regime, false, scale);
}

int ElementSampler::extreme_scale(Rng &rng) const {
  // Of the widest floating-point component; narrower ones clamp it to their own range.
  std::pair<int, int> range{0, 0};
  for (const Component &c : components_)
    if (c.type.is_float() && binades(c.type).second > range.second) range = binades(c.type);
  return coin(rng) ? range.first : range.second - 2;
}

Values ElementSampler::draw(Rng &rng, Regime regime, bool mask_always, int scale) const {
  Values x;
  bool first_float = true;
  for (size_t k = 0; k < components_.size(); ++k) {
    const Type &t = components_[k].type;
    if (!t.is_float()) {
      x.push_back(in_domain(rng, k, draw_integer(rng, t, regime)));
      continue;
    }
    const bool mask = regime == Regime::masked && first_float &&
                      (mask_always || std::uniform_int_distribution<int>(0, 2)(rng) == 0);
    const Real value =
        mask ? -std::numeric_limits<Real>::infinity()
        : regime == Regime::extremes
            ? draw_extreme_float(rng, t, std::clamp(scale, binades(t).first, binades(t).second - 2))
            : draw_float(rng, t, regime);
    x.push_back(in_domain(rng, k, value));
    first_float = false;
  }
  return x;
}

// The value itself where the domain holds it; otherwise one of the domain's bounds, or a value drawn
// between them or beyond the one bound, so that the bounds themselves are drawn often.
Real ElementSampler::in_domain(Rng &rng, size_t k, Real value) const {
  if (domains_.empty() || !domains_[k].restricts()) return value;
  const Domain &d = domains_[k];
  if (d.contains(static_cast<double>(value))) return value;
  const Type &t = components_[k].type;
  const double scale = std::ldexp(1.0, std::uniform_int_distribution<int>(-2, 2)(rng));
  double v;
  const int choice = std::uniform_int_distribution<int>(0, 2)(rng);
  if (choice == 0 && d.lo)
    v = *d.lo;
  else if (choice == 1 && d.hi)
    v = *d.hi;
  else if (d.lo && d.hi)
    v = std::uniform_real_distribution<double>(*d.lo, *d.hi)(rng);
  else if (d.lo)
    v = *d.lo + std::fabs(std::normal_distribution<double>(0.0, scale)(rng));
  else if (d.hi)
    v = *d.hi - std::fabs(std::normal_distribution<double>(0.0, scale)(rng));
  else
    v = static_cast<double>(value);
  if (d.integral || !t.is_float()) v = std::round(v);
  if (t.is_float()) v = round_to_type(t, v);
  // Rounding may step outside a bound; the bound itself is in the domain.
  if (!d.contains(v)) v = d.lo ? *d.lo : *d.hi;
  return v;
}

std::vector<Values> ElementSampler::list(Rng &rng, int length, Regime regime) const {
  return list(rng, length, regime, extreme_scale(rng));
}

std::vector<Values> ElementSampler::list(Rng &rng, int length, Regime regime, int scale) const {
  const bool mask_always = regime == Regime::masked && std::uniform_int_distribution<int>(0, 3)(rng) == 0;
  std::vector<Values> out;
  for (int i = 0; i < length; ++i) out.push_back(draw(rng, regime, mask_always, scale));
  return out;
}

Regime ElementSampler::any_regime(Rng &rng) const {
  bool has_float = false;
  for (const Component &c : components_) has_float |= c.type.is_float();
  const int k = std::uniform_int_distribution<int>(0, 7)(rng);
  if (k == 7 && has_float) return Regime::masked;
  if (k >= 5) return Regime::extremes;
  if (k >= 3) return Regime::ties;
  return Regime::spread;
}

}  // namespace twist::algebra
