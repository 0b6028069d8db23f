#pragma once
// Bit-exact conversions between double and the 16-bit floating-point formats that GPUs compute in: IEEE
// binary16 (f16) and bfloat16 (bf16). They round directly from double to nearest, ties to even, so a double
// is rounded once (rounding through float first would round twice and can land on the wrong neighbour).
// Overflow goes to infinity as IEEE prescribes, tiny values become subnormals (gradual underflow), zeros
// keep their sign, and a NaN stays a NaN (quiet, sign kept).
#include <cstdint>

#include "lang/types.h"

namespace twist {

uint16_t f16_bits(double x);
double from_f16_bits(uint16_t bits);

uint16_t bf16_bits(double x);
double from_bf16_bits(uint16_t bits);

// x rounded to the nearest value of floating-point type t: f16 and bf16 as above, f32 by conversion to float
// (round to nearest even), f64 unchanged. Throws twist::Error for any other type.
double round_to_type(const Type &t, double x);

}  // namespace twist
