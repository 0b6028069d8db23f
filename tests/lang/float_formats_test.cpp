#include <doctest/doctest.h>
#include <fmt/format.h>
#include <llvm/ADT/APFloat.h>

#include <cmath>
#include <random>

#include "lang/error.h"
#include "lang/float_formats.h"

using namespace twist;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// The independent reference: LLVM's software floating point, rounding to nearest with ties to even.
uint16_t apfloat_bits(const llvm::fltSemantics &semantics, double x) {
  llvm::APFloat v(x);
  bool lost = false;
  v.convert(semantics, llvm::APFloat::rmNearestTiesToEven, &lost);
  return static_cast<uint16_t>(v.bitcastToAPInt().getZExtValue());
}

double apfloat_value(const llvm::fltSemantics &semantics, uint16_t bits) {
  llvm::APFloat v(semantics, llvm::APInt(16, bits));
  bool lost = false;
  v.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven, &lost);
  return v.convertToDouble();
}

bool is_nan_f16(uint16_t b) {
  return (b & 0x7C00) == 0x7C00 && (b & 0x03FF) != 0;
}
bool is_nan_bf16(uint16_t b) {
  return (b & 0x7F80) == 0x7F80 && (b & 0x007F) != 0;
}

struct FormatUnderTest {
  const char *name;
  const llvm::fltSemantics &semantics;
  uint16_t (*to_bits)(double);
  double (*from_bits)(uint16_t);
  uint16_t max_finite_bits;
  int max_exponent;
  uint16_t quiet_bit;
};

std::vector<FormatUnderTest> formats() {
  return {{"f16", llvm::APFloat::IEEEhalf(), f16_bits, from_f16_bits, 0x7BFF, 15, 0x0200},
          {"bf16", llvm::APFloat::BFloat(), bf16_bits, from_bf16_bits, 0x7F7F, 127, 0x0040}};
}

}  // namespace

TEST_CASE("f16 known bit patterns") {
  CHECK(f16_bits(1.0) == 0x3C00);
  CHECK(f16_bits(-2.0) == 0xC000);
  CHECK(f16_bits(0.1) == 0x2E66);
  CHECK(f16_bits(1.0 / 3.0) == 0x3555);
  CHECK(f16_bits(65504.0) == 0x7BFF);
  CHECK(f16_bits(65519.99) == 0x7BFF);
  CHECK(f16_bits(65520.0) == 0x7C00);  // the midpoint to 2^16 ties to the even neighbour, which overflows
  CHECK(f16_bits(-65520.0) == 0xFC00);
  CHECK(f16_bits(1e300) == 0x7C00);
  CHECK(f16_bits(kInf) == 0x7C00);
  CHECK(f16_bits(-kInf) == 0xFC00);
  CHECK(f16_bits(0.0) == 0x0000);
  CHECK(f16_bits(-0.0) == 0x8000);
  // Subnormals: 2^-24 is the smallest; half of it is a tie with zero, which is even.
  CHECK(f16_bits(std::ldexp(1.0, -24)) == 0x0001);
  CHECK(f16_bits(std::ldexp(1.0, -25)) == 0x0000);
  CHECK(f16_bits(-std::ldexp(1.0, -25)) == 0x8000);
  CHECK(f16_bits(std::ldexp(0.75, -24)) == 0x0001);
  CHECK(f16_bits(std::ldexp(1.5, -24)) == 0x0002);  // tie between 1 and 2 units: even
  CHECK(f16_bits(std::ldexp(2.5, -24)) == 0x0002);  // tie between 2 and 3 units: even
  CHECK(f16_bits(-std::ldexp(3.0, -24)) == 0x8003);
  CHECK(f16_bits(std::ldexp(1.0, -14)) == 0x0400);                         // the smallest normal
  CHECK(f16_bits(std::ldexp(1.0, -14) - std::ldexp(1.0, -25)) == 0x0400);  // largest subnormal + 1/2 unit
  CHECK(f16_bits(1e-300) == 0x0000);
  CHECK(f16_bits(std::numeric_limits<double>::denorm_min()) == 0x0000);
  // Ties to even in the normal range.
  CHECK(f16_bits(1.0 + std::ldexp(1.0, -11)) == 0x3C00);
  CHECK(f16_bits(1.0 + 3 * std::ldexp(1.0, -11)) == 0x3C02);
  CHECK(f16_bits(-(1.0 + 3 * std::ldexp(1.0, -11))) == 0xBC02);
  // Just above a tie rounds up. Through float the 2^-40 would be lost first and the tie would go down:
  // the conversion must round once, from double.
  CHECK(f16_bits(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40)) == 0x3C01);
  CHECK(f16_bits(static_cast<float>(1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40))) == 0x3C00);
  // A carry out of the fraction moves to the next binade.
  CHECK(f16_bits(2.0 - std::ldexp(1.0, -12)) == 0x4000);

  const uint16_t nan = f16_bits(std::nan(""));
  CHECK(is_nan_f16(nan));
  CHECK((nan & 0x0200) != 0);  // quiet
  const uint16_t negative_nan = f16_bits(-std::nan(""));
  CHECK(is_nan_f16(negative_nan));
  CHECK((negative_nan & 0x8000) != 0);
  // A signalling double NaN whose payload lies below the f16 fraction still converts to a NaN.
  CHECK(is_nan_f16(f16_bits(std::bit_cast<double>(uint64_t{0x7FF0000000000001}))));
}

TEST_CASE("f16 decoding") {
  CHECK(from_f16_bits(0x3C00) == 1.0);
  CHECK(from_f16_bits(0xC000) == -2.0);
  CHECK(from_f16_bits(0x7BFF) == 65504.0);
  CHECK(from_f16_bits(0x0001) == std::ldexp(1.0, -24));
  CHECK(from_f16_bits(0x03FF) == std::ldexp(1023.0, -24));
  CHECK(from_f16_bits(0x0400) == std::ldexp(1.0, -14));
  CHECK(from_f16_bits(0x3C01) == 1.0 + std::ldexp(1.0, -10));
  CHECK(from_f16_bits(0x7C00) == kInf);
  CHECK(from_f16_bits(0xFC00) == -kInf);
  CHECK(std::isnan(from_f16_bits(0x7E00)));
  CHECK(std::signbit(from_f16_bits(0x8000)));
  CHECK(from_f16_bits(0x8000) == 0.0);
}

TEST_CASE("bf16 known bit patterns") {
  const double max_finite = std::ldexp(2.0 - std::ldexp(1.0, -7), 127);
  CHECK(bf16_bits(1.0) == 0x3F80);
  CHECK(bf16_bits(-2.0) == 0xC000);
  CHECK(bf16_bits(0.1) == 0x3DCD);
  CHECK(bf16_bits(max_finite) == 0x7F7F);
  CHECK(bf16_bits(std::ldexp(2.0 - std::ldexp(1.0, -8), 127)) == 0x7F80);  // the midpoint to 2^128
  CHECK(bf16_bits(std::nextafter(std::ldexp(2.0 - std::ldexp(1.0, -8), 127), 0.0)) == 0x7F7F);
  CHECK(bf16_bits(-std::ldexp(1.0, 128)) == 0xFF80);
  CHECK(bf16_bits(-0.0) == 0x8000);
  CHECK(bf16_bits(std::ldexp(1.0, -133)) == 0x0001);
  CHECK(bf16_bits(std::ldexp(1.0, -134)) == 0x0000);
  CHECK(bf16_bits(std::ldexp(0.75, -133)) == 0x0001);
  CHECK(bf16_bits(std::ldexp(1.5, -133)) == 0x0002);
  CHECK(bf16_bits(-std::ldexp(1.0, -134)) == 0x8000);
  CHECK(bf16_bits(std::ldexp(1.0, -126)) == 0x0080);
  CHECK(bf16_bits(1.0 + std::ldexp(1.0, -8)) == 0x3F80);
  CHECK(bf16_bits(1.0 + 3 * std::ldexp(1.0, -8)) == 0x3F82);
  CHECK(bf16_bits(-(1.0 + 3 * std::ldexp(1.0, -8))) == 0xBF82);
  CHECK(bf16_bits(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)) == 0x3F81);
  const uint16_t nan = bf16_bits(std::nan(""));
  CHECK(is_nan_bf16(nan));
  CHECK((nan & 0x0040) != 0);

  CHECK(from_bf16_bits(0x3F80) == 1.0);
  CHECK(from_bf16_bits(0x7F7F) == max_finite);
  CHECK(from_bf16_bits(0x0001) == std::ldexp(1.0, -133));
  CHECK(from_bf16_bits(0xFF80) == -kInf);
  CHECK(std::isnan(from_bf16_bits(0x7FC0)));
}

TEST_CASE("round_to_type rounds to each floating-point type and refuses others") {
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -30);
  CHECK(round_to_type(f16, x) == 1.0 + std::ldexp(1.0, -10));
  CHECK(round_to_type(bf16, 3.0 + std::ldexp(1.0, -7)) == 3.0);
  CHECK(round_to_type(f32, x) == static_cast<double>(static_cast<float>(x)));
  CHECK(round_to_type(f32, x) != x);
  CHECK(round_to_type(f64, x) == x);
  CHECK(round_to_type(f16, 70000.0) == kInf);
  CHECK_THROWS_WITH_AS(round_to_type(i32, 1.5), doctest::Contains("i32 is not a floating-point element type"),
                       Error);
}

TEST_CASE(
    "every 16-bit pattern decodes as LLVM's APFloat decodes it, and encodes back to itself (NaNs quiet)") {
  for (const FormatUnderTest &f : formats()) {
    CAPTURE(std::string(f.name));
    int mismatches = 0;
    for (uint32_t b = 0; b <= 0xFFFF; ++b) {
      const auto bits = static_cast<uint16_t>(b);
      const double got = f.from_bits(bits), want = apfloat_value(f.semantics, bits);
      const bool same = std::isnan(want) ? std::isnan(got) && std::signbit(got) == std::signbit(want)
                                         : std::bit_cast<uint64_t>(got) == std::bit_cast<uint64_t>(want);
      // A signalling NaN comes back quiet; every other pattern comes back unchanged.
      const uint16_t back = std::isnan(want) ? bits | f.quiet_bit : bits;
      if (!same || f.to_bits(got) != back) ++mismatches;
    }
    CHECK(mismatches == 0);
  }
}

TEST_CASE("conversion from double agrees bit for bit with LLVM's APFloat on a million values") {
  std::mt19937_64 rng(20240611);
  for (const FormatUnderTest &f : formats()) {
    CAPTURE(std::string(f.name));
    std::vector<double> values;
    // Random doubles across the whole exponent range of the format, from far below the smallest subnormal
    // to beyond overflow.
    std::uniform_int_distribution<int> exponent(-f.max_exponent - 40, f.max_exponent + 3);
    std::uniform_int_distribution<uint64_t> fraction(0, (uint64_t{1} << 52) - 1);
    for (int k = 0; k < 250000; ++k) {
      const double significand = std::bit_cast<double>(uint64_t{0x3FF0000000000000} | fraction(rng));
      values.push_back(std::ldexp(rng() & 1 ? -significand : significand, exponent(rng)));
    }
    // Exact ties: the midpoint between a random finite value and its successor (the one above the largest
    // finite value being the next power of two), and the doubles just either side of each midpoint.
    std::uniform_int_distribution<uint32_t> pattern(0, f.max_finite_bits);
    for (int k = 0; k < 80000; ++k) {
      const auto bits = static_cast<uint16_t>(pattern(rng));
      const double lo = f.from_bits(bits);
      const double hi = bits == f.max_finite_bits ? std::ldexp(1.0, f.max_exponent + 1)
                                                  : f.from_bits(static_cast<uint16_t>(bits + 1));
      const double mid = lo + (hi - lo) / 2;
      REQUIRE(mid > lo);
      REQUIRE(mid < hi);
      const double sign = rng() & 1 ? -1.0 : 1.0;
      for (double v : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, kInf)}) values.push_back(sign * v);
    }
    for (double special : {0.0, -0.0, kInf, -kInf, std::numeric_limits<double>::denorm_min(),
                           std::numeric_limits<double>::max(), std::numeric_limits<double>::min()})
      values.push_back(special);
    REQUIRE(values.size() > 490000);

    int mismatches = 0;
    for (double x : values) {
      const uint16_t got = f.to_bits(x), want = apfloat_bits(f.semantics, x);
      if (got != want) {
        if (++mismatches <= 5)
          MESSAGE(fmt::format("{}: {:a} gives {:#06x} but APFloat gives {:#06x}", f.name, x, got, want));
      }
    }
    CHECK(mismatches == 0);
  }
}
