#pragma once
// The GEMM's schedule by rule: one documented rule over the problem (M, N, K, batch, input type) and the
// machine picks the schedule, instead of a table of shapes tuned one by one. Users' shapes are not the
// benchmark's, so every figure the rule is judged by must come from shapes it was not tuned on.
//
// gemm_plan_by_rule picks the datapath first:
//  - the Hopper schedule (schedule_hopper: TMA ring, wgmma) where the target has wgmma and TMA can copy both
//    operands, that is where rows of A (K elements) and of B (N elements) are multiples of 16 bytes;
//  - otherwise the mma.sync schedule (schedule_tensor_core, cp.async, whose copies narrow to the row's
//    alignment): on sm_80, and on sm_90a for the shapes TMA refuses (N or K not a multiple of 8 elements).
//
// The Hopper rule (hopper_tiling_by_rule) is a cost model evaluated over a few tilings, blocks per SM and
// split-K factors; the tiling with the least modeled time wins (docs/hopper.md, "The schedule rule"):
//  - tilings: block M x N of 128x256, 256x128, 128x128 (two consumer warpgroups) and 64x256, 64x128, 64x64
//    (one), block K 64 (one 128-byte swizzled row of 16-bit elements); no block with more than one atom of
//    rows or 64 columns past the problem's edge (skinny M takes the 64-row blocks);
//  - blocks per SM from registers (accumulators plus what the rest of the kernel holds) and shared memory;
//  - time = max(compute, memory) + the combine kernel when K is split, where compute counts the tiles of
//    the busiest SM (ceil(blocks / SMs) x k-tiles: a last wave that is nearly empty costs a whole wave, which
//    is how the rule prefers the tiling whose last wave is fullest), and no block runs a k-tile faster than
//    one warpgroup's round of barriers followed by its wgmmas; memory is the bytes that must come
//    from HBM (A and B once, the output, split-K's partial sums written and read back) at the least of HBM's
//    bandwidth, the bandwidth the bytes in flight sustain (Little's law: active blocks x bytes in their ring
//    / latency) and what L2 delivers to the active SMs (every block's tiles of A and B, re-reads included);
//  - stages: memory-bound plans take every slot the shared-memory budget holds (bytes in flight are what
//    they run on); compute-bound ones the depth that covers the memory latency with the compute of the tiles
//    ahead (deeper rings measured slower on the H200, bench/RESULTS.md); never more than the slice's k-tiles;
//  - ties (within 2%) go to the plan that moves fewer operand bytes through L2, then to fewer K slices, then
//    to more blocks running on each SM, then to the deeper ring.
//
// The mma.sync rule (mma_sync_tiling_by_rule), for sm_80 and the shapes TMA refuses:
//  1. Skinny problems (M <= 64) are memory-bound: the time is reading B once. They take the small block
//     64x64x32 (warps 32x32, 3 stages): padding M up to 64 rows wastes only idle tensor cores, and its 116
//     registers per thread let 4 blocks share an SM, so more of B is in flight.
//  2. Otherwise the problem is compute-bound. Block 128x256x64 (warps 64x64, 3 stages, one block per SM)
//     loads A half as often per flop as 128x128x64, so it is taken when its tiles fill every SM at least
//     once; otherwise 128x128x64 (warps 64x64, 3 stages, two blocks per SM), which makes twice the tiles.
//  3. Split-K (split_k_by_rule): when the tiles give fewer blocks than the SMs hold at once, K is split into
//     enough slices to fill them, but only as far as it pays: each slice keeps at least 4 k-blocks (the
//     3-stage pipeline's fill and one more), at most 16 slices, and the f32 partial sums that the slices
//     write and the combine reads (2 x 4 bytes x M x N per slice) stay within an eighth of the bytes of B
//     (2 x N x K for 16-bit inputs).
#include <cstdint>
#include <variant>

#include "apps/gemm/gemm.h"
#include "scheduler/target.h"

namespace twist::apps {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t batch = 1;
  Type input = f16;
};

// The GPU the rule plans for: its target (budgets, datapath), how many SMs it has, and the rates of the
// Hopper rule's cost model. The defaults are an H200 SXM's (H100 SXM: the same but 3.35 TB/s of HBM).
struct GemmMachine {
  Target target = Target::sm90a();
  int sm_count = 132;
  int shared_bytes_per_sm = 228 * 1024;  // what the blocks on an SM share; each block also reserves 1 KB
  // Dense 16-bit tensor-core flops per SM per second that the best kernels sustain: cuBLAS's 650-700 TFLOP/s
  // at 4096^3 on the H200 (bench/RESULTS.md) over 132 SMs. The tensor cores' peak is 989 TFLOP/s.
  double tensor_flops_per_sm = 5e12;
  double hbm_bytes_per_s = 4.35e12;  // HBM read bandwidth, measured by bench_gemm.py (torch.sum over 4 GiB)
  // What L2 delivers to the SMs, over all of them: about 60 GB/s per SM. Fitted to the ratio of the Hopper
  // GEMM's 128x128 and 128x256 tilings at 4096^3 (477 against 582 TFLOP/s): the one tile-shape effect the
  // model must explain is the operand bytes per flop that each tile pulls through L2.
  double l2_bytes_per_s = 8e12;
  // A load's latency from HBM under load: what the bytes in flight must cover.
  double memory_latency_s = 1e-6;
  // A warpgroup's round of synchronization per k-tile (wait for the tile's copy, issue the wgmmas, wait for
  // the previous group, release its slot, issue the next copy), which its wgmmas follow: 0.4 us, fitted to
  // the skinny exploration on the H200 (bench/RESULTS.md), where a block of one warpgroup streamed a k-tile
  // in 0.5 us at 64 columns, 0.6 us at 128 and 0.84 us at 256. It keeps few blocks of small tiles from
  // streaming B.
  double k_tile_sync_s = 0.4e-6;
  // What split-K's combine kernel adds besides its bytes: its launch behind the first kernel, its ramp.
  double second_kernel_s = 2e-6;
};

// Split-K slices for a grid of `tiles` blocks of `block_k`-deep k-steps, `blocks_per_sm` of which fit an SM
// at once: 1 where splitting does not pay (mma.sync rule 3 above).
int split_k_by_rule(const GemmShape &shape, int64_t tiles, int block_k, int blocks_per_sm,
                    const GemmMachine &machine);

// The mma.sync tiling rules 1 to 3 choose.
GemmTiling mma_sync_tiling_by_rule(const GemmShape &shape, const GemmMachine &machine = {});

// A Hopper tiling and what the cost model expects of it.
struct HopperPlan {
  HopperTiling tiling;
  int blocks_per_sm = 1;      // what registers and shared memory allow
  int blocks_sharing_sm = 1;  // what the grid puts on the busiest SM at once: at most blocks_per_sm
  double compute_s = 0, memory_s = 0, combine_s = 0;
  double seconds() const;
};

// Every Hopper plan the rule weighs for a shape (one per tiling, blocks per SM and split-K factor that fit
// the machine), each with its modeled times.
std::vector<HopperPlan> hopper_plans(const GemmShape &shape, const GemmMachine &machine = {});

// The Hopper plan of least modeled time (ties as above). Throws, naming the shape and what to do, where TMA
// cannot copy the operands or the target has no wgmma.
HopperPlan hopper_plan_by_rule(const GemmShape &shape, const GemmMachine &machine = {});

// Whether the Hopper schedule can take the shape on the machine: wgmma on the target, rows of A and B that
// are multiples of 16 bytes.
bool hopper_takes(const GemmShape &shape, const GemmMachine &machine);

// The schedule the rule picks: one of the two datapaths' tilings.
struct GemmPlan {
  std::variant<GemmTiling, HopperTiling> tiling;
  bool hopper() const { return std::holds_alternative<HopperTiling>(tiling); }
  std::string name() const;
  Accumulation accumulation() const;
  Schedule schedule(const Gemm &g) const;
};

// The datapath and its tiling, as described at the top of this file. Throws, naming the shape, for an empty
// problem or an input type the tensor-core schedules do not take (f16 and bf16 only).
GemmPlan gemm_plan_by_rule(const GemmShape &shape, const GemmMachine &machine = {});

}  // namespace twist::apps
