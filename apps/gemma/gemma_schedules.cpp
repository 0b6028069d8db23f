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

bool qkv_norms_fuse(const QkvNormRope &n, const GemmPlan &plan) {
  const auto *t = std::get_if<HopperTiling>(&plan.tiling);
  return t && !n.values_from_keys && t->block_n == n.head_dim && t->split_k == 1 && !t->stream_k;
}

Schedule schedule_qkv_norm_rope(const QkvNormRope &n, const GemmPlan &plan) {
  // The batched GEMM's schedule moved onto the per-head projection (its loops and inputs have its names).
  const Gemm batched = make_gemm({.input = n.dtype, .output = n.dtype, .batched = true, .prefix = n.prefix});
  Schedule s;
  s.set_like(n.C, *plan.schedule(batched).find(batched.C.name()));
  // Where a block is not one head, or a full layer's v heads read k's sums, the sums are a stage of their
  // own and the norms one row kernel, one block per (head, row).
  if (!qkv_norms_fuse(n, plan)) s[n.C].compute_root();
  s[n.ss].compute_at(n.out, n.i);
  return s;
}

Schedule schedule_residual_norm(const ResidualNorm &n) {
  Schedule s;
  s[n.ss_x].compute_at(n.out, n.i);
  s[n.ss_h].compute_at(n.out, n.i);
  return s;
}

AttentionTiling attention_tiling(const Attention &a, const LayerAttentionShape &shape) {
  const AttentionOptions &o = a.options;
  if (o.decode)
    return decode_tiling({.head_dim = o.head_dim,
                          .group = o.group,
                          .batch_kv_heads = shape.batch * (shape.heads / o.group),
                          .keys = shape.keys,
                          .element_bytes = o.dtype.bytes()});
  return hopper_attention_tiling({.head_dim = o.head_dim,
                                  .causal = o.causal,
                                  .batch_heads = shape.batch * shape.heads,
                                  .queries = shape.queries,
                                  .keys = shape.keys,
                                  .group = o.group,
                                  .element_bytes = o.dtype.bytes()});
}

Schedule schedule_layer_attention(const Attention &a, const LayerAttentionShape &shape) {
  const AttentionTiling t = attention_tiling(a, shape);
  return a.options.decode ? schedule_decode(a, t) : schedule_attention(a, t);
}

}  // namespace twist::apps::gemma
