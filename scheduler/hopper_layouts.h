#pragma once
// The Hopper layouts that the TMA copies, the wgmma matrix descriptors and the wgmma fragments follow, as the
// PTX ISA defines them ("Tensor copy swizzle modes", "Matrix descriptor format", "Canonical layouts" and
// "Register fragments" of the wgmma section). The lowering, the CUDA printer and the reference interpreter
// all take them from here, so that a layout is written down once and tested once.
#include <cstdint>

#include "scheduler/loop_nest.h"

namespace twist::hopper {

using Swizzle = TensorMap::Swizzle;

// The bytes of one swizzled row: 32, 64 or 128 (0 for Swizzle::none).
int swizzle_bytes(Swizzle s);
// The shared-memory byte address where the byte at unswizzled address `address` lives: the 16-byte chunk
// index (bits 4 and up) is XORed with the row index within the 8-row pattern (bits 7 and up), over 1, 2 or 3
// bits for the 32, 64 and 128-byte modes (CuTe's Swizzle<1,4,3>, <2,4,3>, <3,4,3>). The pattern is a
// function of the absolute address, which is why swizzled tiles start at a multiple of 8 rows' bytes.
int64_t swizzled_address(int64_t address, Swizzle s);
// The alignment a swizzled tile's first byte needs so that its row 0 is row 0 of the pattern.
int swizzle_alignment(Swizzle s);

// A wgmma operand in shared memory is K-major (each row of M or N holds consecutive k) or MN-major (each
// row of k holds consecutive m or n: a row-major K x N B, or a transposed A).
enum class Major { k, mn };

// The fields of a 64-bit wgmma matrix descriptor: bits 0-13 the start address >> 4, 16-29 the leading
// dimension byte offset >> 4, 32-45 the stride dimension byte offset >> 4, 49-51 the base offset (0: tiles
// start at a pattern boundary), 62-63 the swizzle mode (0 none, 1 128 B, 2 64 B, 3 32 B).
struct MatrixDescriptor {
  int64_t start_address = 0;  // shared-memory byte address, a multiple of 16, below 2^18
  int64_t leading_bytes = 0;  // LBO: see element_address
  int64_t stride_bytes = 0;   // SBO: see element_address
  Swizzle swizzle = Swizzle::none;
};
uint64_t encode(const MatrixDescriptor &d);
MatrixDescriptor decode(uint64_t bits);
// The descriptor's swizzle-mode code (bits 62-63).
int swizzle_mode_code(Swizzle s);

// The shared-memory byte address of element (row, k) of an operand described by `d` (row is m for A, n for
// B), for 16-bit elements, after the swizzle. The canonical layouts, with W the swizzle's row bytes and
// T = 8 elements (16 bytes):
//   K-major, swizzled:   (row % 8) * W + (row / 8) * SBO + k * 2                    (LBO unused)
//   K-major, none:       (row % 8) * 16 + (row / 8) * SBO + (k % 8) * 2 + (k / 8) * LBO
//   MN-major, swizzled:  (row % (W/2)) * 2 + (row / (W/2)) * LBO + (k % 8) * W + (k / 8) * SBO
//   MN-major, none:      (row % 8) * 2 + (row / 8) * SBO + (k % 8) * 16 + (k / 8) * LBO
int64_t element_address(const MatrixDescriptor &d, Major major, int row, int k);

// wgmma.mma_async m64nNk16: N from 8 to 256 in steps of 8.
bool is_wgmma_n(int n);
inline constexpr int kWarpgroupThreads = 128;

// Where element i of thread t's fragment lies (t is the thread's index within its warpgroup; w = t / 32,
// g = (t % 32) / 4, q = t % 4):
//   accumulator (N / 2 elements): row 16w + g + 8 * ((i % 4) / 2), column 8 * (i / 4) + 2q + i % 2;
//   A from registers (8 elements): row 16w + g + 8 * ((i / 2) % 2), column 2q + i % 2 + 8 * (i / 4).
struct FragmentPosition {
  int row, col;
};
FragmentPosition accumulator_position(int thread, int i);
FragmentPosition register_a_position(int thread, int i);

}  // namespace twist::hopper
