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
// The Hopper rule (hopper_plan_by_rule) is a cost model of the kernels it emits (warp-specialized, a producer
// warpgroup beside the consumers; persistent, one block per SM) evaluated over a few tilings and split-K
// factors; the plan with the least modeled time wins (docs/hopper.md, "The schedule rule", with each term's
// evidence):
//  - tilings: block M x N of 128x256, 256x128, 128x128 (two consumer warpgroups) and 64x256, 64x128, 64x64
//    (one), block K 64, and 128 for one-warpgroup blocks; no block taller or wider than the problem but the
//    smallest, 64x64 (skinny M takes the 64-row blocks);
//  - compute: the persistent grid deals its work units (tile, K slice) to the SMs round-robin, so the busiest
//    SM runs its full waves at the rate of a busy chip and its last wave at the rate of the SMs in it (a last
//    wave of one unit runs alone, fast: the tail costs a unit, not a wave). A k-tile takes the longest of a
//    consumer warpgroup's chain (its round of barriers, then its wgmmas, each k-step no faster than the
//    atom's latency; a second warpgroup computes meanwhile), its share of the flops the whole chip sustains,
//    and its share of what L2 delivers;
//    After its k-tiles each unit writes its output tile from registers at its share of HBM;
//  - memory: A and B once and the output, at the least of HBM's streaming
//    rate and what the bytes in flight sustain (Little's law); compute and memory overlap (their 4-norm);
//  - split-K: a second kernel, and the f32 partials written and read back; it pays only where the unsplit
//    grid leaves most SMs idle for a long K (1000x1000x7000), never for a tail of a few tiles
//    (896x4864x4096);
//  - stages: memory-bound plans take every slot the shared-memory budget holds (bytes in flight are what
//    they run on); compute-bound ones the depth that covers the memory latency with the compute of the tiles
//    ahead (deeper rings measured slower on the H200, bench/RESULTS.md); at least 3, and no more than the
//    slice's k-tiles unless that is fewer;
//  - ties (within 2%) go to fewer K slices (no second kernel), then to the plan that moves fewer operand
//    bytes through L2, then to block K 64, then to the deeper ring.
//
// The mma.sync rule (mma_sync_tiling_by_rule), for sm_80 and the shapes TMA refuses:
//  1. Skinny problems (M <= 64) are memory-bound: the time is reading B once. They take the small block
//     64x64x32 (warps 32x32, 3 stages): padding M up to 64 rows wastes only idle tensor cores, and its 116
//     registers per thread let 4 blocks share an SM, so more of B is in flight.
//  2. Rows of A or B that are not multiples of 16 bytes (the kernel whose copies narrow to them) take block
//     128x128x64 with warps of 64x32: at 64x64 that kernel spilled (777x3333x1240, 0.65x cuBLAS; 1.00x so).
//     Otherwise the problem is compute-bound. Block 128x256x64 (warps 64x64, 3 stages, one block per SM)
//     loads A half as often per flop as 128x128x64, so it is taken when its tiles fill every SM at least
//     once; otherwise 128x128x64 (warps 64x64, 3 stages, two blocks per SM), which makes twice the tiles.
//  3. Split-K (split_k_by_rule): when the tiles give fewer blocks than the SMs hold at once, K is split into
//     enough slices to fill them, but only as far as it pays: each slice keeps at least 4 k-blocks (the
//     3-stage pipeline's fill and one more), at most 16 slices, and the f32 partial sums that the slices
//     write and the combine reads (2 x 4 bytes x M x N per slice) stay within an eighth of the bytes of B
//     (2 x N x K for 16-bit inputs).
#include <cstdint>
#include <optional>
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
// Hopper rule's cost model, fitted to the warp-specialized persistent kernels the rule emits (every measured
// configuration in bench/results/gemm_merged.json, gemm_midsize_explore.json, hopper_ws.json and
// hopper_ws_configs.json; docs/hopper.md, "The schedule rule", gives each term's evidence). The defaults are
// an H200 SXM's.
struct GemmMachine {
  Target target = Target::sm90a();
  int sm_count = 132;
  int shared_bytes_per_sm = 228 * 1024;  // what the blocks on an SM share; each block also reserves 1 KB
  // The tensor cores' dense 16-bit peak on one SM: 989 TFLOP/s over 132 SMs.
  double tensor_flops_per_sm = 989e12 / 132;
  // What the whole chip sustains with every SM's tensor cores busy (clocks drop under that load): a k-tile of
  // 128x256 takes 0.78 us with 132 SMs busy against 0.72 us with 32 or 128 (1024^3, 2048^3); cuBLAS's best
  // is 713 TFLOP/s at 4096^3.
  double chip_flops_per_s = 710e12;
  // A consumer warpgroup's k-tile besides the wgmmas' flops: issuing them and waiting for the group (fitted
  // to 128x128 against 128x256, both two warpgroups, at 1024^3 and 4096^3).
  double wgmma_round_s = 0.0775e-6;
  // A consumer warpgroup's round of the ring's barriers per k-tile (wait for the copy, release the slot),
  // which its next wgmmas wait for: one warpgroup's blocks are bound by it (64x128 at 1024^3, 64x256 at
  // 896x4864x4096). In a block of two, each warpgroup's round overlaps the other's wgmmas.
  double k_tile_sync_s = 0.16e-6;
  // What L2 delivers to the SMs, over all of them: 128x128 tiles pull a third more operand bytes per flop
  // than 128x256 and measured 0.48 us a k-tile against 0.78 for twice the flops at 4096^3.
  double l2_bytes_per_s = 8.7e12;
  // What a GEMM streams from HBM once launched: 3.1-3.5 TB/s for ours and cuBLAS's skinny GEMMs, past the
  // fixed cost below (torch.sum over 4 GiB reaches 4.35 TB/s).
  double hbm_bytes_per_s = 3.4e12;
  // A load's latency from HBM under load: what the bytes in flight must cover. A deeper ring does not help
  // where the consumers' chain is the limit: 64x64x128 blocks on 64 SMs ran 1x4096x4096 in 23.8 us with 4
  // slots and 23.0 with 7 (bench/results/gemm_skinny_alternatives.json).
  double memory_latency_s = 1e-6;
  // The least time of a wgmma m64nNk16 step that waits for the one before it (the k-steps of a k-tile
  // accumulate into the same registers): about the issue-to-result latency of the atom, which the flops of N
  // = 128 take at the tensor cores' peak. So N below 128 does not shorten a k-tile: one warpgroup of
  // 64x64x128 ran a k-tile in 0.53 us (1x4096x4096, 64 SMs; 32 k-tiles in 17 us past the launch) as
  // 64x128x128 did (0.54, 32 SMs), where the flops alone would take 0.14 and 0.28
  // (bench/results/gemm_skinny_alternatives.json).
  double wgmma_step_s = 0.035e-6;
  // What every launch costs in the benchmark's timing besides its work (the launch, the first loads after
  // do_bench's L2 flush, the last epilogue): 6 us, the intercept of the unsplit plans' fit.
  double launch_s = 6e-6;
  // Split-K's combine: the second kernel's launch and ramp (4 us: the skinny splits of 4096x4096, whose
  // partials are a few hundred KB, ran 20.0-20.4 us against 6 us of launch and 9.9 of B at the rate above),
  // and the f32 partial sums read back at 1.5 TB/s (the first kernel's epilogue writes them, at its share of
  // HBM like any output tile). At 2 TB/s every measured split of a mid-size shape ran 6-12% slower than
  // modeled (1000x1000x7000 split 2 and 4, 2645x1672x9216 split 2 and 3, 896x4864x4096 split 4), and the
  // rule split 2645x1672x9216, which ran 218.7 us split against 203.0 unsplit
  // (bench/results/gemm_skinny_alternatives.json, gemm_rule_skinny.json).
  double second_kernel_s = 4e-6;
  double partial_bytes_per_s = 1.5e12;
  // Stream-K (HopperTiling::stream_k: the last tiles split along k across the persistent blocks). Its blocks
  // run different k ranges of neighbouring tiles at once, so they share few operand tiles in L2: a stream-K
  // k-tile takes no less than the busy blocks' operand tiles at this rate (fitted to one run on the H200,
  // 2026-12-03, bench/results/gemm_streamk.json: 128x256 k-tiles of 1.1 us against 0.78 in whole waves;
  // 2048x5120x5120 ran 217.9 us with stream-K against 178.6 without, 4096^3 237.0 against 213.5, and
  // 896x4864x4096, whose 133 tiles of 64 k-tiles keep the blocks' k offsets together, 66.8 against 75.9).
  double stream_k_operand_bytes_per_s = 5.9e12;
  // The last part of a tile folds the other parts one after the other, each a round trip to memory
  // (memory_latency_s): 1x4096x4096 on 64x256 tiles (8 parts a tile) ran 28.8 us with stream-K against 19.9
  // split 3 ways with a combine kernel, whose fold runs 16 independent chains. So the rule weighs stream-K
  // only where the tiles are at least the blocks (at most two parts a tile).
  // Whether the rule weighs stream-K plans at all; false gives the rule as it was measured before stream-K
  // (`twist export gemm --rule true --stream-k false`).
  bool stream_k = true;
  // Whether it also weighs stream-K of the partial wave alone (StreamKTiles::tail: the full waves stay whole
  // and in step along k, the tail's tiles in many parts). Measured 2026-12-04 (bench/RESULTS.md, "GEMM:
  // stream-K of the tail alone"): 0.59x -> 0.79x cuBLAS at 2645x1672x9216, where stream-K of the tail and a
  // wave thrashed L2; false gives the rule before it (`twist export gemm --rule true --stream-k-tail false`).
  bool stream_k_tail = true;
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
  // The busiest SM's k-tiles (the persistent grid's full waves, then its last one), the bytes from HBM, the
  // combine kernel (split-K), and the launch's fixed cost.
  double compute_s = 0, memory_s = 0, combine_s = 0, launch_s = 0;
  double seconds() const;
};

// Every Hopper plan the rule weighs for a shape (one per tiling, blocks per SM and split-K factor that fit
// the machine), each with its modeled times.
std::vector<HopperPlan> hopper_plans(const GemmShape &shape, const GemmMachine &machine = {});

// The Hopper plan of least modeled time (ties as above). Throws, naming the shape and what to do, where TMA
// cannot copy the operands or the target has no wgmma.
HopperPlan hopper_plan_by_rule(const GemmShape &shape, const GemmMachine &machine = {});

// What the cost model expects of a given Hopper tiling at a shape (its block, block K, split and stages), or
// nothing where the model does not describe it: a block shape it does not weigh, a ring the shared memory
// does not hold, or a kernel that is not warp-specialized and persistent over the machine's SMs. `twist
// export gemm` writes it into the manifest's notes (modeled_us) so that apps/gemm/bench_gemm.py reports it
// beside the measurement.
std::optional<HopperPlan> hopper_plan_of(const GemmShape &shape, const HopperTiling &tiling,
                                         const GemmMachine &machine = {});

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
