#pragma once
// 64-bit element offsets for the buffers that need them.
//
// The lowering indexes global buffers with i32 expressions (a flat row-major element offset), which is what
// the hardware adds for free and what every kernel of buffers under 2^31 elements wants. A buffer of more
// elements (a decode batch's KV cache: 64 sequences x 4 heads x 32768 keys x 512 = 2^32) needs its offsets
// in 64 bits. The rule, applied to every kernel at the end of lower():
//   - a buffer "can pass" 32-bit offsets when the product of its extents can exceed 2^31 - 1: its extents
//     are constants whose product does, or any of them is symbolic (a scalar argument: unbounded);
//   - a kernel whose buffers cannot pass is left as it is (its text does not change);
//   - a kernel with a buffer that passes at every shape (constant extents past 2^31 - 1) addresses the
//     buffers that can pass in 64 bits, itself;
//   - otherwise the kernel keeps its 32-bit offsets, and select_variant launches instead, at the scalars
//     where buffers of it hold more than 2^31 - 1 elements, its variant that addresses exactly those
//     buffers in 64 bits (made on first use and kept in Kernel::wide_variants; each fallback variant has
//     its own): a decode batch whose KV cache passes 2^31 elements widens the offsets into K and V, and
//     its query, output and partial results stay on 32-bit offsets.
// The 64-bit form of an offset (widen_offsets) keeps its leaves (variables, divisions, remainders, loads)
// in 32 bits and computes the sums, products, selects, minima and maxima above them in 64 bits, each leaf
// sign-extended where it joins: the products of large strides are the ones that overflow, and a 32 x 32 ->
// 64-bit multiply of sign-extended operands is one instruction (mul.wide.s32). Let-bound index arithmetic
// that an offset uses is recomputed in 64 bits at the use.
#include <set>
#include <string>

#include "scheduler/loop_nest.h"

namespace twist {

// Whether the product of `b`'s extents can exceed 2^31 - 1 (see above).
bool can_pass_32_bit_offsets(const BufferArg &b);

// `body` with every offset into the global buffers `buffers` (loads, stores, copies, atomic adds, arrival
// tickets) in 64 bits. Throws if another intrinsic names one of them.
Halide::Internal::Stmt widen_offsets(const Halide::Internal::Stmt &body,
                                     const std::set<std::string> &buffers);

// `k` under the rule above: unchanged, wide itself, or with wide variants to make (and the same for its
// fallbacks).
Kernel with_wide_offsets(const Kernel &k);

// The variant of `k` (which has wide_variants) with 64-bit offsets into `buffers` as well; made once.
const Kernel &wide_variant(const Kernel &k, const std::set<std::string> &buffers);

// `program` with each kernel (and each fallback) that has wide variants replaced by the one that addresses
// every buffer that can pass 32-bit offsets in 64 bits, whatever the shape. For tests (the interpreter runs
// the 64-bit form at small shapes) and for measuring what the 64-bit form costs (twist export
// --wide-offsets).
LoweredProgram force_wide_offsets(const LoweredProgram &program);

}  // namespace twist
