#pragma once
// The GEMM's schedule by rule: one documented rule over the problem (M, N, K, batch, input type) and the
// machine picks the tiling, instead of a table of shapes tuned one by one. Users' shapes are not the
// benchmark's, so every figure the rule is judged by must come from shapes it was not tuned on.
//
// The rule, for the mma.sync datapath (sm_80 and, until wgmma lowers, sm_90a):
//  1. Skinny problems (M <= 64) are memory-bound: the time is reading B once. They take the small block
//     64x64x32 (warps 32x32, 3 stages): padding M up to 64 rows wastes only idle tensor cores, and its 116
//     registers per thread let 4 blocks share an SM, so more of B is in flight.
//  2. Otherwise the problem is compute-bound. Block 128x256x64 (warps 64x64, 3 stages, one block per SM)
//  loads
//     A half as often per flop as 128x128x64, so it is taken when its tiles fill every SM at least once;
//     otherwise 128x128x64 (warps 64x64, 3 stages, two blocks per SM), which makes twice the tiles.
//  3. Split-K, for any tiling (split_k_by_rule): when the tiles give fewer blocks than the SMs hold at once,
//     K is split into enough slices to fill them, but only as far as it pays: each slice keeps at least 4
//     k-blocks (the 3-stage pipeline's fill and one more), at most 16 slices, and the f32 partial sums that
//     the slices write and the combine reads (2 x 4 bytes x M x N per slice) stay within an eighth of the
//     bytes of B (2 x N x K for 16-bit inputs). That is what lets skinny shapes (M = 1, 16) use the whole
//     machine, and it keeps split-K away from shapes where the partials would cost more than they recover.
//
// Extension point for Hopper: the wgmma datapath chooses its own block (a wgmma N from the tile, warpgroups,
// stages within 227 KB) in a function beside mma_sync_block (gemm_rule.cpp), which gemm_tiling_by_rule calls
// when machine.target.has_wgmma, and reuses split_k_by_rule with its own blocks per SM.
#include <cstdint>

#include "apps/gemm/gemm.h"
#include "scheduler/target.h"

namespace twist::apps {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  Type input = f16;
};

// The GPU the rule plans for: its target (budgets, datapath) and how many SMs it has.
struct GemmMachine {
  Target target = Target::sm90a();
  int sm_count = 132;  // H100 and H200 SXM
};

// Split-K slices for a grid of `tiles` blocks of `block_k`-deep k-steps, `blocks_per_sm` of which fit an SM
// at once: 1 where splitting does not pay (rule 3 above).
int split_k_by_rule(const GemmShape &shape, int64_t tiles, int block_k, int blocks_per_sm,
                    const GemmMachine &machine);

// The tiling rules 1 to 3 choose. Throws, naming the shape, for an empty problem or an input type the
// tensor-core schedules do not take (f16 and bf16 only).
GemmTiling gemm_tiling_by_rule(const GemmShape &shape, const GemmMachine &machine = {});

}  // namespace twist::apps
