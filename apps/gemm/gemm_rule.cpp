#include "apps/gemm/gemm_rule.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "lang/error.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/stream_k.h"

namespace twist::apps {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int64_t tiles_of(const GemmShape &s, int block_m, int block_n) {
  return ceil_div(s.m, block_m) * ceil_div(s.n, block_n) * s.batch;
}

void check_shape(const GemmShape &s, const char *rule) {
  if (s.m < 1 || s.n < 1 || s.k < 1 || s.batch < 1)
    fail("{}: the shape {}x{}x{} (batch {}) is empty; every extent must be at least 1", rule, s.m, s.n, s.k,
         s.batch);
  if (s.input != f16 && s.input != bf16)
    fail("{}: {} inputs have no tensor-core schedule; use f16 or bf16, or schedule_simt", rule,
         type_name(s.input));
}

// --- mma.sync --------------------------------------------------------------------------------------------

// A tiling of the mma.sync schedule and how many of its blocks share an SM, from its registers per thread (as
// ptxas reports them for these tilings on sm_90a, bench/RESULTS.md) and its shared memory (3 stages of A's
// and B's tiles in 16-bit elements).
struct MmaBlock {
  GemmTiling tiling;
  int blocks_per_sm;
};

MmaBlock mma_block(int block_m, int block_n, int block_k, int warp_m, int warp_n, int registers_per_thread,
                   const Target &target) {
  GemmTiling t;
  t.block_m = block_m, t.block_n = block_n, t.block_k = block_k;
  t.warp_m = warp_m, t.warp_n = warp_n;
  t.stages = 3;
  const int threads = block_m / warp_m * block_n / warp_n * 32;
  const int shared_bytes = t.stages * (block_m + block_n) * block_k * 2;
  const int by_registers = target.registers_per_sm / (threads * registers_per_thread);
  const int by_shared = target.max_shared_bytes_per_block / shared_bytes;
  return {t, std::max(1, std::min(by_registers, by_shared))};
}

// Rules 1 and 2.
MmaBlock mma_sync_block(const GemmShape &s, const GemmMachine &machine) {
  if (s.m <= 64) return mma_block(64, 64, 32, 32, 32, 116, machine.target);
  // Rows of A or B that are not a multiple of 16 bytes take the kernel whose copies narrow to the rows'
  // alignment; its per-element addresses cost registers, and at 64x64 warp tiles it spilled (255 registers,
  // 392 bytes at 777x3333x1240: 0.65x cuBLAS). Warp tiles of 64x32 hold half the accumulators (238
  // registers, no spill; 1.00x cuBLAS, bench/results/gemm_rule2.json).
  if (s.n % 8 != 0 || s.k % 8 != 0) return mma_block(128, 128, 64, 64, 32, 238, machine.target);
  if (tiles_of(s, 128, 256) >= machine.sm_count) return mma_block(128, 256, 64, 64, 64, 250, machine.target);
  return mma_block(128, 128, 64, 64, 64, 250, machine.target);
}

// --- Hopper ----------------------------------------------------------------------------------------------

struct HopperBlock {
  int m, n, warpgroups;
};
// Largest first: of plans the model finds equal, the first listed moves the fewest operand bytes per flop.
// Nothing narrower than 64 columns: its k-tile takes as long (the wgmma step's latency) and HBM serves its
// 64-byte rows of B at half the rate (64x32x128 blocks: 24.6 and 22.4 us at 1x4096x4096 and 16x4096x4096,
// against 20.0-20.5 split on 64x128; bench/results/gemm_rule2.json, gemm_skinny_alternatives.json).
constexpr HopperBlock kHopperBlocks[] = {{128, 256, 2}, {256, 128, 2}, {128, 128, 2},
                                         {64, 256, 1},  {64, 128, 1},  {64, 64, 1}};
// Block K: 64 (one 128-byte swizzled row of 16-bit elements); one-warpgroup blocks may also take 128, which
// halves their rounds of barriers per byte (a block of two overlaps one warpgroup's round with the other's
// wgmmas, so deeper k-tiles would buy it only fewer slots).
constexpr int kBlockK = 64, kDeepBlockK = 128;
constexpr int kElementBytes = 2;
// A ring of two slots leaves no load in flight while the consumers finish the other: 64x256 blocks of block
// K 128 (two slots fit) measured 50.6-51.8 us at 1x4096x14336 and 16x4096x14336 against 45.1 for block K 64.
constexpr int kMinStages = 3;
// Registers per thread besides the f32 accumulators (addresses, descriptors, loop state): ptxas gives the
// 128x256 tiling with two warpgroups 154 registers, 128 of them accumulators.
constexpr int kRegistersBesideAccumulators = 26;
constexpr int kMaxSplitK = 16;
constexpr double kTie = 1.02;  // plans within 2% of the fastest are equal to the model
// How compute and memory times combine: the 4-norm, a little more than the larger alone where they are
// nearly equal (neither then has slack to absorb the other's stalls), the larger where one dominates.
constexpr double kOverlapNorm = 4;

int64_t k_tiles_of(const GemmShape &s, int block_k) {
  return ceil_div(s.k, block_k);
}

// Stream-K's split of the last tiles as the kernel runs it (scheduler/stream_k.h's plan, its constants
// folded): the k-tiles the busiest block runs there, the blocks that share them, the tiles each finishes, and
// the f32 partial tiles each writes and reads (every part of a tile of several parts is written; the last to
// arrive reads the others).
struct StreamKWork {
  int64_t dp_waves = 0, k_tiles = 0, blocks = 0, most_parts = 1;
  double finished_tiles = 0, partial_tiles = 0;
};

StreamKWork stream_k_work(int64_t tiles, int64_t k_tiles, int64_t blocks, StreamKTiles split_tiles) {
  const PersistentUnits u =
      plan_persistent_units(Halide::Expr(static_cast<int>(tiles)), Halide::Expr(static_cast<int>(k_tiles)),
                            static_cast<int>(blocks), true, split_tiles);
  auto value = [](const Halide::Expr &e) {
    const std::optional<int64_t> v = constant_value(e);
    TWIST_CHECK(v, "stream-K's split of constant tiles folds to constants");
    return *v;
  };
  StreamKWork w;
  w.dp_waves = value(u.dp_waves);
  const int64_t sk_tiles = value(u.sk_tiles);
  w.blocks = value(u.sk_blocks);
  if (w.blocks == 0) return w;  // whole waves only
  w.k_tiles = ceil_div(value(u.sk_iterations), w.blocks);
  auto owner = [&](int64_t i) { return value(stream_k_owner(u, Halide::Expr(static_cast<int>(i)))); };
  int64_t partials = 0;
  for (int64_t tile = 0; tile < sk_tiles; ++tile) {
    const int64_t parts = owner(tile * k_tiles + k_tiles - 1) - owner(tile * k_tiles) + 1;
    if (parts > 1) partials += 2 * parts - 1;
    w.most_parts = std::max(w.most_parts, parts);
  }
  w.finished_tiles = static_cast<double>(sk_tiles) / static_cast<double>(w.blocks);
  w.partial_tiles = static_cast<double>(partials) / static_cast<double>(w.blocks);
  return w;
}

// One plan of the model: `block` tiles of depth `block_k`, K split into `split` slices (or with `stream_k`,
// the last tiles' k-tiles split across the blocks), warp-specialized and persistent with one block on each
// SM (its consumers take every register the producer leaves); a ring of `stages` slots, or the depth the
// rule gives where `stages` is 0.
HopperPlan model(const GemmShape &s, const HopperBlock &block, int block_k, int split, bool stream_k,
                 StreamKTiles sk_tiles, const GemmMachine &mc, int stages = 0) {
  HopperPlan p;
  HopperTiling &t = p.tiling;
  t.block_m = block.m, t.block_n = block.n, t.block_k = block_k, t.warpgroups = block.warpgroups;
  t.split_k = split;
  t.stream_k = stream_k;
  t.stream_k_tiles = sk_tiles;
  t.persistent_blocks = mc.sm_count;
  const int64_t slice = ceil_div(k_tiles_of(s, block_k), split);  // k-tiles per work unit
  // The persistent grid's work units, (tile, slice) pairs, dealt round-robin to the SMs: full waves of every
  // SM, then a last one of `last` units.
  const int64_t units = tiles_of(s, block.m, block.n) * split;
  const int64_t full_waves = units / mc.sm_count, last = units % mc.sm_count;
  // (Stream-K keeps every block busy to the end.)
  const int64_t active = stream_k ? mc.sm_count : std::min<int64_t>(units, mc.sm_count);

  const int64_t rows_read = std::min<int64_t>(block.m, s.m);  // TMA fills rows past M with zeros, unread
  const double tile_bytes = static_cast<double>((rows_read + block.n) * block_k * kElementBytes);
  const double tile_flops = 2.0 * block.m * block.n * block_k;
  // A consumer warpgroup's k-tile: its round of barriers, then its wgmmas (issue, flops, wait), which the
  // next round waits for; the block's other warpgroup computes meanwhile. With `busy` SMs at work, a k-tile
  // also takes no less than its share of what the chip sustains and of what L2 delivers.
  // Each 64-row atom of a warpgroup's rows is its own wgmmas: 256x128 (two atoms of N 128 per warpgroup)
  // measured 15% slower than 128x256 (one of N 256) at 4096^3.
  // The k-steps of an atom accumulate into the same registers, so each waits for the one before it: no
  // faster than the step's latency.
  const int atoms = block.m / block.warpgroups / 64;
  const double step_s = std::max(mc.wgmma_step_s, 2.0 * 64 * block.n * 16 / mc.tensor_flops_per_sm);
  const double wgmma_s = atoms * (mc.wgmma_round_s + block_k / 16 * step_s);
  const double round_s = std::max(block.warpgroups * wgmma_s, mc.k_tile_sync_s + wgmma_s);
  auto k_tile_s = [&](int64_t busy) {
    const double n = static_cast<double>(busy);
    return std::max({round_s, tile_flops * n / mc.chip_flops_per_s, tile_bytes * n / mc.l2_bytes_per_s});
  };
  // After its k-tiles a unit's consumers write its output tile (f32 partials when split) from registers,
  // which the next unit's k-tiles wait for; with `busy` SMs writing at once each gets its share of HBM.
  const double out_tile_bytes = static_cast<double>(block.m) * block.n * (split > 1 ? 4 : kElementBytes);
  auto unit_s = [&](int64_t busy) {
    return static_cast<double>(slice) * k_tile_s(busy) +
           out_tile_bytes * static_cast<double>(busy) / mc.hbm_bytes_per_s;
  };
  p.compute_s = static_cast<double>(full_waves) * unit_s(mc.sm_count) + (last > 0 ? unit_s(last) : 0.0);
  if (stream_k) {
    // Whole tiles in all waves but the last full one, then the busiest block's range of the rest, the
    // output tiles it finishes and its f32 partial tiles written and read. Those go through L2 (a part is
    // read by the tile's last part within a tile's time of being written; the parts in flight, at most two
    // a tile past the first wave, are a few tens of MB), not measured yet: the combine kernel's partials
    // (partial_bytes_per_s) are read by a second kernel after every part is written.
    const StreamKWork w = stream_k_work(units, k_tiles_of(s, block_k), mc.sm_count, sk_tiles);
    const double out_bytes = static_cast<double>(block.m) * block.n * kElementBytes;
    const double partial_bytes = static_cast<double>(block.m) * block.n * 4;
    const double busy = static_cast<double>(w.blocks);
    const double sk_k_tile_s =
        std::max(k_tile_s(w.blocks), tile_bytes * busy / mc.stream_k_operand_bytes_per_s);
    p.compute_s = static_cast<double>(w.dp_waves) * unit_s(mc.sm_count) +
                  static_cast<double>(w.k_tiles) * sk_k_tile_s +
                  w.finished_tiles * out_bytes * busy / mc.hbm_bytes_per_s +
                  w.partial_tiles * partial_bytes * busy / mc.l2_bytes_per_s +
                  static_cast<double>(w.most_parts - 1) * mc.memory_latency_s;
  }

  // Stages: what the budget holds. The output tile the epilogue writes back (at most 4 bytes an element)
  // reuses the ring's bytes, so it must fit the budget too.
  const int stage_bytes = (block.m + block.n) * block_k * kElementBytes;
  const int block_budget = std::min(mc.target.max_shared_bytes_per_block, mc.shared_bytes_per_sm - 1024) -
                           256;  // the ring's mbarriers
  const bool write_back_fits = block.m * block.n * 4 <= block_budget;
  t.stages = write_back_fits ? std::min<int>(block_budget / stage_bytes,
                                             static_cast<int>(std::max<int64_t>(kMinStages, slice)))
                             : 0;
  if (t.stages < kMinStages) return p;  // not a plan: the caller drops it
  if (stages > 0 && stages * stage_bytes > block_budget) {
    t.stages = 0;  // a ring the budget does not hold
    return p;
  }

  // HBM: A and B once, and the output (unsplit; split-K's partials are the epilogue's and the combine's).
  // The bytes in flight must cover the latency (Little's law) for the bandwidth to be reached.
  const double outputs = static_cast<double>(s.m * s.n * s.batch);
  const double hbm_bytes =
      static_cast<double>(s.batch) * kElementBytes * static_cast<double>(s.m * s.k + s.k * s.n) +
      (split > 1 ? 0.0 : kElementBytes * outputs);
  auto memory_s = [&](int depth) {
    const double in_flight = static_cast<double>(active) * (depth - 1) * tile_bytes;
    return hbm_bytes / std::min(mc.hbm_bytes_per_s, in_flight / mc.memory_latency_s);
  };
  // Compute-bound: the depth whose tiles ahead cover the latency; memory-bound: every slot that fits.
  const int covering =
      std::max(kMinStages, 1 + static_cast<int>(std::ceil(mc.memory_latency_s / k_tile_s(active))));
  if (stages > 0)
    t.stages = stages;
  else if (covering < t.stages && memory_s(covering) < p.compute_s)
    t.stages = covering;
  p.memory_s = memory_s(t.stages);
  p.combine_s = split > 1 ? mc.second_kernel_s + 4.0 * split * outputs / mc.partial_bytes_per_s +
                                kElementBytes * outputs / mc.hbm_bytes_per_s
                          : 0;
  p.launch_s = mc.launch_s;
  return p;
}

}  // namespace

double HopperPlan::seconds() const {
  const double overlapped =
      std::pow(std::pow(compute_s, kOverlapNorm) + std::pow(memory_s, kOverlapNorm), 1 / kOverlapNorm);
  return launch_s + overlapped + combine_s;
}

int split_k_by_rule(const GemmShape &s, int64_t tiles, int block_k, int blocks_per_sm,
                    const GemmMachine &machine) {
  const int64_t resident = int64_t{blocks_per_sm} * machine.sm_count;
  if (tiles >= resident) return 1;
  const int64_t to_fill = ceil_div(resident, tiles);
  const int64_t pipeline_deep = ceil_div(s.k, block_k) / 4;
  // 8 * m * n * slices <= (2 * n * k) / 8, the partials' traffic within an eighth of B's.
  const int64_t partials_cheap = s.k / (32 * s.m);
  return static_cast<int>(
      std::max<int64_t>(1, std::min({to_fill, pipeline_deep, partials_cheap, int64_t{16}})));
}

GemmTiling mma_sync_tiling_by_rule(const GemmShape &s, const GemmMachine &machine) {
  check_shape(s, "mma_sync_tiling_by_rule");
  MmaBlock b = mma_sync_block(s, machine);
  b.tiling.split_k = split_k_by_rule(s, tiles_of(s, b.tiling.block_m, b.tiling.block_n), b.tiling.block_k,
                                     b.blocks_per_sm, machine);
  return b.tiling;
}

bool hopper_takes(const GemmShape &s, const GemmMachine &machine) {
  const int per_16_bytes = 16 / kElementBytes;
  return machine.target.has_wgmma && machine.target.has_tma && s.k % per_16_bytes == 0 &&
         s.n % per_16_bytes == 0;
}

std::vector<HopperPlan> hopper_plans(const GemmShape &s, const GemmMachine &mc) {
  check_shape(s, "hopper_plans");
  std::vector<HopperPlan> plans;
  for (const HopperBlock &block : kHopperBlocks) {
    // No block taller or wider than the problem, but the smallest (64 rows, 64 columns): the staging sizes a
    // TMA box by an extent known when lowering, and a box smaller than the block leaves the wgmma reading
    // past its slot (the interpreter refuses Gemma's gate and up projection, N = 80, on 64x128x128).
    if (block.m > std::max<int64_t>(64, s.m) || block.n > std::max<int64_t>(64, s.n)) continue;
    HopperTiling consumers;
    consumers.warpgroups = block.warpgroups;
    const int accumulators = block.m * block.n / (128 * block.warpgroups);
    if (accumulators + kRegistersBesideAccumulators > consumers.consumer_registers()) continue;
    for (int block_k : {kBlockK, kDeepBlockK}) {
      if (block_k != kBlockK && block.warpgroups > 1) continue;
      const int64_t k_tiles = k_tiles_of(s, block_k);
      // Split parts share a block.z with batches, so a batched GEMM does not split; every part has k-tiles.
      for (int split = 1; split <= (s.batch > 1 ? 1 : kMaxSplitK); ++split) {
        if ((split - 1) * ceil_div(k_tiles, split) >= k_tiles) break;
        // Without stream-K, and with it where the tiles fill a wave
        // (GemmMachine::stream_k_operand_bytes_per_s): the tail and a wave split, or the tail alone where
        // there is one.
        const int64_t tiles = tiles_of(s, block.m, block.n);
        const bool stream_k = split == 1 && mc.stream_k && tiles >= mc.sm_count;
        const bool tail_alone = stream_k && mc.stream_k_tail && tiles % mc.sm_count != 0;
        std::vector<std::pair<bool, StreamKTiles>> forms = {{false, StreamKTiles::tail_and_wave}};
        if (stream_k) forms.emplace_back(true, StreamKTiles::tail_and_wave);
        if (tail_alone) forms.emplace_back(true, StreamKTiles::tail);
        for (const auto &[sk, sk_tiles] : forms) {
          HopperPlan p = model(s, block, block_k, split, sk, sk_tiles, mc);
          if (p.tiling.stages >= kMinStages) plans.push_back(p);
        }
      }
    }
  }
  return plans;
}

std::optional<HopperPlan> hopper_plan_of(const GemmShape &s, const HopperTiling &t, const GemmMachine &mc) {
  check_shape(s, "hopper_plan_of");
  if (!t.warp_specialized || t.persistent_blocks != mc.sm_count) return std::nullopt;
  for (const HopperBlock &block : kHopperBlocks)
    if (block.m == t.block_m && block.n == t.block_n && block.warpgroups == t.warpgroups) {
      HopperPlan p = model(s, block, t.block_k, t.split_k, t.stream_k, t.stream_k_tiles, mc, t.stages);
      if (p.tiling.stages >= kMinStages) return p;
    }
  return std::nullopt;
}

HopperPlan hopper_plan_by_rule(const GemmShape &s, const GemmMachine &mc) {
  if (!hopper_takes(s, mc))
    fail(
        "hopper_plan_by_rule: the shape {}x{}x{} cannot take the Hopper schedule on {}: it needs wgmma and "
        "TMA, and rows of A (K = {}) and B (N = {}) that are multiples of 16 bytes (8 elements); use "
        "gemm_plan_by_rule, which falls back to the mma.sync schedule",
        s.m, s.n, s.k, mc.target.arch, s.k, s.n);
  const std::vector<HopperPlan> plans = hopper_plans(s, mc);
  if (plans.empty())
    fail("hopper_plan_by_rule: no Hopper tiling fits the shared memory and registers of {} for {}x{}x{}",
         mc.target.arch, s.m, s.n, s.k);
  double fastest = plans[0].seconds();
  for (const HopperPlan &p : plans) fastest = std::min(fastest, p.seconds());
  // Among the plans the model cannot tell apart: fewer slices (no second kernel), then no stream-K (no
  // partials), then the least operand traffic through L2, then the k-tile depth measured most (64), then the
  // deeper ring.
  auto preference = [&](const HopperPlan &p) {
    return std::tuple(p.tiling.split_k, p.tiling.stream_k, p.tiling.stream_k_tiles == StreamKTiles::tail,
                      tiles_of(s, p.tiling.block_m, p.tiling.block_n) * (p.tiling.block_m + p.tiling.block_n),
                      p.tiling.block_k, -p.tiling.stages);
  };
  const HopperPlan *best = nullptr;
  for (const HopperPlan &p : plans)
    if (p.seconds() <= fastest * kTie && (!best || preference(p) < preference(*best))) best = &p;
  return *best;
}

std::string GemmPlan::name() const {
  return std::visit([](const auto &t) { return t.name(); }, tiling);
}

Accumulation GemmPlan::accumulation() const {
  return std::visit([](const auto &t) { return t.accumulation; }, tiling);
}

Schedule GemmPlan::schedule(const Gemm &g) const {
  if (const auto *h = std::get_if<HopperTiling>(&tiling)) return schedule_hopper(g, *h);
  return schedule_tensor_core(g, std::get<GemmTiling>(tiling));
}

GemmPlan gemm_plan_by_rule(const GemmShape &s, const GemmMachine &machine) {
  check_shape(s, "gemm_plan_by_rule");
  if (hopper_takes(s, machine)) return {hopper_plan_by_rule(s, machine).tiling};
  return {mma_sync_tiling_by_rule(s, machine)};
}

}  // namespace twist::apps
