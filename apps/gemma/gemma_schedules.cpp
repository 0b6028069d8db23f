// Every schedule of the Gemma kernels, chosen in this one file: the library's schedules as they stand, so
// that a better GEMM or attention schedule (the Hopper datapath) changes the line that picks it here.
#include <algorithm>
#include <variant>

#include "apps/gemm/gemm_rule.h"
#include "apps/gemma/gemma.h"

namespace twist::apps::gemma {

GemmPlan projection_plan(int64_t m, int64_t n, int64_t k) {
  return gemm_plan_by_rule({.m = m, .n = n, .k = k, .batch = 1, .input = bf16});
}

Schedule schedule_gated_up(const GatedUp &g, const GemmPlan &plan) {
  // The GEMM as `plan` tiles it; the gate reads its column pairs, which the accumulator layouts keep in
  // one thread, so it is the GEMM's epilogue (scheduler/realization.h) and only [M, I] is stored, in tiles
  // half the block's width (of the 2I columns where those are fewer): TMA stores them where their rows are
  // a multiple of 32 bytes, as it needs.
  GemmPlan fused = plan;
  if (auto *t = std::get_if<HopperTiling>(&fused.tiling)) {
    const int row_bytes = std::min(t->block_n, 2 * g.intermediate) / 2 * g.dtype.bytes();
    if (row_bytes % 32 != 0) t->tma_store = false;
  }
  return fused.schedule(g.gemm);
}

Schedule schedule_head_norm(const HeadNorm &n) {
  Schedule s;
  s[n.ss].compute_at(n.out, n.s);  // one block per (batch, head, token): the head's row folded by a tree
  return s;
}

Schedule schedule_residual_norm(const ResidualNorm &n) {
  Schedule s;
  s[n.ss_x].compute_at(n.out, n.i);
  s[n.ss_h].compute_at(n.out, n.i);
  return s;
}

AttentionTiling attention_tiling(int head_dim, bool decode, int kv_length) {
  AttentionTiling t;
  // Wider heads hold more of the output tile in registers: fewer keys per step (as for D = 256 in
  // tests/scheduler/attention_lowering_test.cpp).
  t.key_tile = head_dim >= 256 ? 32 : 64;
  // Full layers' heads of 512: a block of 128 queries would stage 128 KB of Q alone, past the 227 KB with K
  // and V.
  if (head_dim >= 512) t.block_rows = 64;
  // Decoding splits long key sequences across blocks (flash-decoding): a block per 1024 keys, up to 16.
  if (decode) t.split_kv = std::clamp(kv_length / 1024, 1, 16);
  return t;
}

Schedule schedule_layer_attention(const Attention &a, bool decode, int kv_length) {
  const AttentionTiling t = attention_tiling(a.options.head_dim, decode, kv_length);
  return decode ? schedule_decode(a, t) : schedule_attention(a, t);
}

}  // namespace twist::apps::gemma
