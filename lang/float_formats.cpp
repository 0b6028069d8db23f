#include "lang/float_formats.h"

#include <algorithm>
#include <bit>

#include "lang/error.h"

namespace twist {

namespace {

// A binary interchange format of 16 bits: sign, exponent field, fraction field.
struct Format {
  int fraction_bits;  // stored significand bits (the leading 1 of normal numbers is implicit)
  int exponent_bits;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  int min_exponent() const { return 1 - bias(); }  // of the smallest normal number
  int max_exponent() const { return bias(); }
  uint16_t sign_bit() const { return static_cast<uint16_t>(1u << (fraction_bits + exponent_bits)); }
  uint16_t infinity() const { return static_cast<uint16_t>(((1u << exponent_bits) - 1) << fraction_bits); }
  uint16_t quiet_bit() const { return static_cast<uint16_t>(1u << (fraction_bits - 1)); }
};

constexpr Format kF16{10, 5};
constexpr Format kBF16{7, 8};

constexpr int kDoubleFractionBits = 52;
constexpr uint64_t kDoubleFractionMask = (uint64_t{1} << kDoubleFractionBits) - 1;
constexpr int kDoubleExponentMask = 0x7ff;
constexpr int kDoubleBias = 1023;

uint16_t encode(const Format &f, double x) {
  const uint64_t d = std::bit_cast<uint64_t>(x);
  const uint16_t sign = (d >> 63) ? f.sign_bit() : 0;
  const int exponent_field = static_cast<int>((d >> kDoubleFractionBits) & kDoubleExponentMask);
  const uint64_t fraction = d & kDoubleFractionMask;
  if (exponent_field == kDoubleExponentMask) {
    if (fraction == 0) return sign | f.infinity();
    // Keep the leading payload bits, and make the NaN quiet.
    const auto payload = static_cast<uint16_t>(fraction >> (kDoubleFractionBits - f.fraction_bits));
    return sign | f.infinity() | f.quiet_bit() | payload;
  }
  if (exponent_field == 0 && fraction == 0) return sign;

  // |x| = m * 2^e exactly, with m an integer of at most 53 bits.
  const uint64_t m = exponent_field == 0 ? fraction : fraction | (uint64_t{1} << kDoubleFractionBits);
  const int e = exponent_field == 0 ? -1074 : exponent_field - 1075;
  const int exponent = e + static_cast<int>(std::bit_width(m)) - 1;  // |x| is in [2^exponent, 2^(exponent+1))
  if (exponent > f.max_exponent()) return sign | f.infinity();

  // The result is r * 2^q, q being the exponent of one unit in the last place: of |x|'s binade for normal
  // results, of the smallest normal binade for subnormal ones. Since the format has fewer fraction bits than
  // double, q > e and rounding m to a multiple of 2^shift is a right shift with a rounding decision.
  const int q = std::max(exponent, f.min_exponent()) - f.fraction_bits;
  const int shift = q - e;
  uint64_t r = 0;
  if (shift < 64) {  // otherwise |x| < 2^(q-11), far below half a unit: it rounds to zero
    r = m >> shift;
    const uint64_t remainder = m & ((uint64_t{1} << shift) - 1);
    const uint64_t half = uint64_t{1} << (shift - 1);
    if (remainder > half || (remainder == half && (r & 1))) ++r;
  }
  // Adding r to the biased exponent shifted into place lets a carry out of the fraction (r == 2^(fraction
  // bits + 1), or a subnormal rounding up to the smallest normal) increment the exponent, as it should.
  const uint64_t magnitude =
      (static_cast<uint64_t>(q - (f.min_exponent() - f.fraction_bits)) << f.fraction_bits) + r;
  if (magnitude >= f.infinity()) return sign | f.infinity();
  return sign | static_cast<uint16_t>(magnitude);
}

// 2^k as a double, for the exponents of these formats (all within double's normal range).
double power_of_two(int k) {
  return std::bit_cast<double>(static_cast<uint64_t>(kDoubleBias + k) << kDoubleFractionBits);
}

// Every value of the format is a double: normal ones by moving the fields into place, subnormal ones as
// fraction * 2^(smallest exponent), which is exact. (This is on the reference backend's hot path.)
double decode(const Format &f, uint16_t bits) {
  const uint64_t sign = bits & f.sign_bit() ? uint64_t{1} << 63 : 0;
  const int exponent_field = (bits >> f.fraction_bits) & ((1 << f.exponent_bits) - 1);
  const uint64_t fraction = bits & ((1u << f.fraction_bits) - 1);
  const int shift = kDoubleFractionBits - f.fraction_bits;
  if (exponent_field == (1 << f.exponent_bits) - 1) {
    // Infinity, or a NaN with the payload carried over (so that converting back gives the same bits).
    const uint64_t quiet = fraction ? uint64_t{1} << (kDoubleFractionBits - 1) : 0;
    return std::bit_cast<double>(sign | (uint64_t{kDoubleExponentMask} << kDoubleFractionBits) |
                                 (fraction << shift) | quiet);
  }
  if (exponent_field == 0) {
    const double magnitude = static_cast<double>(fraction) * power_of_two(f.min_exponent() - f.fraction_bits);
    return sign ? -magnitude : magnitude;
  }
  const auto exponent = static_cast<uint64_t>(exponent_field - f.bias() + kDoubleBias);
  return std::bit_cast<double>(sign | (exponent << kDoubleFractionBits) | (fraction << shift));
}

}  // namespace

uint16_t f16_bits(double x) {
  return encode(kF16, x);
}
double from_f16_bits(uint16_t bits) {
  return decode(kF16, bits);
}

uint16_t bf16_bits(double x) {
  return encode(kBF16, x);
}
double from_bf16_bits(uint16_t bits) {
  return decode(kBF16, bits);
}

double round_to_type(const Type &t, double x) {
  if (t.lanes() == 1 && t.is_bfloat() && t.bits() == 16) return from_bf16_bits(bf16_bits(x));
  if (t.lanes() == 1 && t.is_float()) {
    switch (t.bits()) {
      case 16:
        return from_f16_bits(f16_bits(x));
      case 32:
        return static_cast<float>(x);
      case 64:
        return x;
    }
  }
  fail("round_to_type: {} is not a floating-point element type; it rounds to f16, bf16, f32 or f64",
       type_name(t));
}

}  // namespace twist
