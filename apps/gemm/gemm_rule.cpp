#include "apps/gemm/gemm_rule.h"

#include <algorithm>

#include "lang/error.h"

namespace twist::apps {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

int64_t tiles_of(const GemmShape &s, int block_m, int block_n) {
  return ceil_div(s.m, block_m) * ceil_div(s.n, block_n) * s.batch;
}

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
  if (tiles_of(s, 128, 256) >= machine.sm_count) return mma_block(128, 256, 64, 64, 64, 250, machine.target);
  return mma_block(128, 128, 64, 64, 64, 250, machine.target);
}

}  // namespace

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

GemmTiling gemm_tiling_by_rule(const GemmShape &s, const GemmMachine &machine) {
  if (s.m < 1 || s.n < 1 || s.k < 1 || s.batch < 1)
    fail("gemm_tiling_by_rule: the shape {}x{}x{} (batch {}) is empty; every extent must be at least 1", s.m,
         s.n, s.k, s.batch);
  if (s.input != f16 && s.input != bf16)
    fail("gemm_tiling_by_rule: {} inputs have no tensor-core schedule; use f16 or bf16, or schedule_simt",
         type_name(s.input));
  MmaBlock b = mma_sync_block(s, machine);
  b.tiling.split_k = split_k_by_rule(s, tiles_of(s, b.tiling.block_m, b.tiling.block_n), b.tiling.block_k,
                                     b.blocks_per_sm, machine);
  return b.tiling;
}

}  // namespace twist::apps
