// The kernels of a Gemma 4 decoder layer (apps/gemma) lowered with their schedules and run on the CPU
// interpreter against the algorithm oracle at the tiny configuration; at the published configuration, lowered
// for sm_90a (its budgets checked) without running.
#include <doctest/doctest.h>

#include <algorithm>

#include "algebra/builtins.h"
#include "apps/gemma/gemma.h"
#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/cuda/runtime/kernel_cache.h"
#include "backends/reference/evaluate_funcs.h"
#include "scheduler/lower.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using namespace twist::apps;
using namespace twist::apps::gemma;
using twist::testing::lowered_error;
using twist::testing::random_inputs;
using twist::testing::Tensors;

namespace {

constexpr double bf16_tolerance = 1.6e-2;  // as the norms' bf16 cases: one bf16 rounding of the output

}  // namespace

TEST_CASE("gemma: gate and up projections as one tensor-core GEMM with the gate in its epilogue") {
  const Config c = gemma4_tiny();
  const int hidden = 192;  // three k-tiles of 64, so that K splits in the split cases
  const GatedUp g = make_gated_up(bf16, hidden, c.intermediate, "gu_");
  struct Case {
    int rows;
    GemmPlan plan;
    Target target;
  };
  // 2I = 80 columns: the last block tile of 64 (32 output columns) is cut short, and 37 rows are odd.
  const HopperTiling split_k{.block_m = 64, .block_n = 64, .warpgroups = 1, .stages = 2, .split_k = 3};
  HopperTiling plain_store = split_k;
  plain_store.split_k = 1;
  plain_store.warp_specialized = false;
  plain_store.persistent_blocks = 0;
  plain_store.tma_store = false;
  const GemmTiling mma{.block_m = 64, .block_n = 64, .block_k = 64, .warp_m = 32, .warp_n = 32, .stages = 2};
  GemmTiling mma_split = mma;
  mma_split.split_k = 3;
  const HopperTiling wide{.block_m = 64, .block_n = 128, .block_k = 128, .warpgroups = 1, .stages = 2};
  for (const Case &k :
       {Case{37, projection_plan(37, 2 * c.intermediate, hidden), Target::sm90a()},
        Case{8, projection_plan(8, 2 * c.intermediate, hidden), Target::sm90a()},
        Case{37, GemmPlan{wide}, Target::sm90a()}, Case{37, GemmPlan{split_k}, Target::sm90a()},
        Case{37, GemmPlan{plain_store}, Target::sm90a()}, Case{37, GemmPlan{mma}, Target::sm80()},
        Case{37, GemmPlan{mma_split}, Target::sm80()}}) {
    INFO(k.rows, " rows, ", k.plan.name(), " on ", k.target.arch);
    const Schedule s = schedule_gated_up(g, k.plan);
    const LoweredProgram p = lower(g.out, s, k.target);
    const bool split = k.plan.hopper() ? std::get<HopperTiling>(k.plan.tiling).split_k > 1
                                       : std::get<GemmTiling>(k.plan.tiling).split_k > 1;
    // No [M, 2I] sums: one kernel, or the split's parts and the combine that finalizes the pairs.
    CHECK(std::none_of(p.workspaces.begin(), p.workspaces.end(),
                       [&](const Workspace &w) { return w.name == g.gemm.C.name(); }));
    CHECK(p.workspaces.size() == (split ? 1u : 0u));
    CHECK(p.kernels.size() == (split ? 2u : 1u));
    CHECK(p.kernels.back().name == g.out.name());
    const std::map<std::string, double> sizes = {
        {g.gemm.M.name(), k.rows}, {g.gemm.N.name(), 2 * c.intermediate}, {g.gemm.K.name(), hidden}};
    CHECK(lowered_error(g.out, s, random_inputs(g.out, sizes, 31), sizes) < bf16_tolerance);
  }
}

TEST_CASE("column pairs: SwiGLU with a bias read from an input fuses on both datapaths, split or not") {
  // Not Gemma's gate: x silu(x Wgate) * (x Wup) + bias over f16 interleaved weights, the bias an input that
  // the epilogue reads (so every point it computes is guarded), 24 output columns of 48.
  const Gemm gemm = make_gemm({.input = f16, .output = f16, .prefix = "swiglu_"});
  const Input bias("swiglu_bias", f32, {Expr(24)});
  Func out("swiglu_out");
  Var i("i"), j("j");
  const Expr gate = gemm.C(i, 2 * j), up = gemm.C(i, 2 * j + 1);
  out(i, j) = cast(f16, gate / (1.0f + exp(-gate)) * up + bias(j));
  out.set_shape({gemm.M, Expr(24)});
  const GemmTiling mma{.block_m = 32, .block_n = 32, .block_k = 32, .warp_m = 32, .warp_n = 16, .stages = 2};
  GemmTiling mma_split = mma;
  mma_split.split_k = 2;
  const HopperTiling wgmma{.block_m = 64,
                           .block_n = 32,
                           .block_k = 64,
                           .warpgroups = 1,
                           .stages = 2,
                           .warp_specialized = false,
                           .persistent_blocks = 0,
                           .tma_store = false};
  for (const auto &[plan, target] :
       {std::pair{GemmPlan{mma}, Target::sm80()}, std::pair{GemmPlan{mma_split}, Target::sm80()},
        std::pair{GemmPlan{wgmma}, Target::sm90a()}}) {
    INFO(plan.name());
    const Schedule s = plan.schedule(gemm);
    const LoweredProgram p = lower(out, s, target);
    CHECK(p.kernels.back().name == out.name());
    CHECK(p.kernels.size() == p.workspaces.size() + 1);  // the split's parts write the only workspace
    CHECK(p.workspaces.size() == (plan.hopper()                                   ? 0u
                                  : std::get<GemmTiling>(plan.tiling).split_k > 1 ? 1u
                                                                                  : 0u));
    const std::map<std::string, double> sizes = {
        {gemm.M.name(), 19}, {gemm.N.name(), 48}, {gemm.K.name(), 128}};
    CHECK(lowered_error(out, s, random_inputs(out, sizes, 43), sizes) < 2e-3);
  }
}

TEST_CASE("gemma: pairs of rows of a contraction are not in one thread, so their consumer is not fused") {
  // The same gate over pairs of the GEMM's rows: the atoms give a thread rows 8 apart, so the GEMM is not
  // placed as the consumer's epilogue but computed at its rows, which refuses two rows; as a stage of its own
  // it is right.
  const Gemm gemm = make_gemm({.input = bf16, .output = bf16, .prefix = "rows_"});
  Func gated("rows_gated");
  Var i("i"), j("j");
  gated(i, j) = cast(bf16, gelu_tanh(cast(f32, gemm.C(2 * i, j))) * cast(f32, gemm.C(2 * i + 1, j)));
  gated.set_shape({Expr(9), gemm.N});
  Schedule s =
      GemmPlan{
          GemmTiling{.block_m = 64, .block_n = 64, .block_k = 32, .warp_m = 32, .warp_n = 32, .stages = 2}}
          .schedule(gemm);
  CHECK_THROWS_WITH(lower(gated, s, Target::sm80()), doctest::Contains("a reduction computed at a row"));
  s[gemm.C].compute_root();
  CHECK(lower(gated, s, Target::sm80()).kernels.size() == 2);
  const std::map<std::string, double> sizes = {{gemm.M.name(), 18}, {gemm.N.name(), 24}, {gemm.K.name(), 40}};
  CHECK(lowered_error(gated, s, random_inputs(gated, sizes, 37), sizes) < bf16_tolerance);
}

TEST_CASE("gemma: q and k RMSNorm with RoPE, and v's norm without weight, read from the fused projection") {
  const Config c = gemma4_tiny();
  for (const LayerType t : {LayerType::sliding, LayerType::full}) {
    const LayerAttention la = layer_attention(c, t);
    const int columns = la.qkv_columns(c.heads);
    struct Group {
      const char *name;
      int heads, first_column;
      bool weight, rope;
    };
    for (const Group &group :
         {Group{"q", c.heads, 0, true, true}, Group{"k", la.kv_heads, la.k_first_column(c.heads), true, true},
          Group{"v", la.kv_heads, la.v_first_column(c.heads), false, false}}) {
      const HeadNorm n = make_head_norm({.dtype = bf16,
                                         .heads = group.heads,
                                         .head_dim = la.head_dim,
                                         .columns = columns,
                                         .first_column = group.first_column,
                                         .weight = group.weight,
                                         .rope = group.rope,
                                         .eps = c.eps,
                                         .prefix = std::string("hn_") + group.name + to_string(t)});
      const Schedule s = schedule_head_norm(n);
      const LoweredProgram p = lower(n.out, s, Target::sm90a());
      INFO(to_string(t), " layer, ", group.name);
      CHECK(p.kernels.size() == 1);
      const std::map<std::string, double> sizes = {{n.batch.name(), 2}, {n.seq.name(), 5}};
      CHECK(lowered_error(n.out, s, random_inputs(n.out, sizes, 41), sizes) < bf16_tolerance);
    }
  }
}

TEST_CASE("gemma: the projection and its q, k, v head norms as one program are the three head norms") {
  // The oracle of the one program against the oracles of the three make_head_norm programs over the stored
  // projection, on the same tensors: the heads' columns, weights, RoPE and output heads are the layer's.
  // Typed arithmetic, each step rounded as the kernels round it, in the same order in both: the same bits.
  const Config c = gemma4_tiny();
  for (const LayerType t : {LayerType::sliding, LayerType::full}) {
    const LayerAttention la = layer_attention(c, t);
    const int D = la.head_dim, columns = la.qkv_columns(c.heads);
    const std::string prefix = std::string("qkv_") + to_string(t) + "_";
    const QkvNormRope fused = make_qkv_norm_rope(c, t, prefix);
    for (const auto &[batch, seq] : {std::pair{1, 7}, std::pair{2, 5}}) {
      INFO(std::string(to_string(t)), " layer, B ", batch, ", S ", seq);
      const std::map<std::string, double> sizes = {{fused.rows.name(), batch * seq},
                                                   {fused.hidden.name(), c.hidden}};
      const Tensors inputs = random_inputs(fused.out, sizes, 53);
      const reference::HostTensor want =
          reference::evaluate(fused.out, {inputs, sizes}, Arithmetic::typed).at(0);
      // The projection as the layer stores it, [B, S, columns / D, D], from the per-head sums [heads, rows,
      // D].
      const reference::HostTensor sums =
          reference::evaluate(fused.C, {inputs, sizes}, Arithmetic::typed).at(0);
      reference::HostTensor x(bf16, {batch, seq, columns / D, D});
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t s = 0; s < seq; ++s)
          for (int64_t g = 0; g < columns / D; ++g)
            for (int64_t d = 0; d < D; ++d) x.set({b, s, g, d}, sums.get({g, b * seq + s, d}));
      auto as_batches = [&](const reference::HostTensor &table) {
        reference::HostTensor out(table.type(), {batch, seq, D});
        for (int64_t e = 0; e < out.size(); ++e) out.set_linear(e, table.get_linear(e));
        return out;
      };
      struct Group {
        const char *name;
        int heads, first_column, first_output_head;
        bool weight, rope;
      };
      for (const Group &group :
           {Group{"q", c.heads, 0, 0, true, true},
            Group{"k", la.kv_heads, la.k_first_column(c.heads), c.heads, true, true},
            Group{"v", la.kv_heads, la.v_first_column(c.heads), c.heads + la.kv_heads, false, false}}) {
        const HeadNorm n = make_head_norm({.dtype = bf16,
                                           .heads = group.heads,
                                           .head_dim = D,
                                           .columns = columns,
                                           .first_column = group.first_column,
                                           .weight = group.weight,
                                           .rope = group.rope,
                                           .eps = c.eps,
                                           .prefix = prefix + group.name + "_"});
        reference::Arguments args{{}, {{n.batch.name(), batch}, {n.seq.name(), seq}}};
        args.inputs.emplace(n.x.name(), x);
        if (n.w)
          args.inputs.emplace(n.w->name(),
                              inputs.at(group.name[0] == 'q' ? fused.q_w.name() : fused.k_w.name()));
        if (n.cos) {
          args.inputs.emplace(n.cos->name(), as_batches(inputs.at(fused.cos.name())));
          args.inputs.emplace(n.sin->name(), as_batches(inputs.at(fused.sin.name())));
        }
        const reference::HostTensor head = reference::evaluate(n.out, args, Arithmetic::typed).at(0);
        double worst = 0;
        for (int64_t b = 0; b < batch; ++b)
          for (int64_t h = 0; h < group.heads; ++h)
            for (int64_t s = 0; s < seq; ++s)
              for (int64_t d = 0; d < D; ++d)
                worst = std::max(worst, std::abs(head.get({b, h, s, d}) -
                                                 want.get({group.first_output_head + h, b * seq + s, d})));
        CHECK_MESSAGE(worst == 0, group.name);
      }
    }
  }
}

TEST_CASE("gemma: the head norms in the projection's epilogue where a block is one head, else a row kernel") {
  // The sliding layer with a Hopper plan one head wide: one kernel, no workspace, the norms folded from the
  // accumulators. Other plans (the rule's, wider than a head here; mma.sync) and the full layers (whose v
  // heads read k's sums): the sums a stage and the norms one row kernel. Odd row counts cut the last tile.
  const Config c = gemma4_tiny();
  // mma.sync one head of the sliding layers wide: its atom is 8 columns, so a quad holds no whole head.
  const GemmTiling mma{.block_m = 64, .block_n = 16, .block_k = 32, .warp_m = 32, .warp_n = 16, .stages = 2};
  for (const LayerType t : {LayerType::sliding, LayerType::full}) {
    const LayerAttention la = layer_attention(c, t);
    const QkvNormRope n = make_qkv_norm_rope(c, t, std::string("qkvl_") + to_string(t) + "_");
    const HopperTiling head_wide{
        .block_m = 128, .block_n = la.head_dim, .block_k = 64, .warpgroups = 2, .stages = 2};
    for (const int rows : {7, 15})
      for (const GemmPlan &plan :
           {GemmPlan{head_wide}, projection_plan(rows, la.qkv_columns(c.heads), c.hidden), GemmPlan{mma}}) {
        INFO(std::string(to_string(t)), " layer, ", rows, " rows, ", plan.name());
        const Schedule s = schedule_qkv_norm_rope(n, plan);
        const LoweredProgram p = lower(n.out, s, Target::sm90a());
        const bool fused = qkv_norms_fuse(n, plan);
        CHECK(fused == (t == LayerType::sliding && plan.hopper() &&
                        std::get<HopperTiling>(plan.tiling).block_n == la.head_dim));
        CHECK(p.kernels.size() == (fused ? 1u : 2u));
        CHECK(p.workspaces.size() == (fused ? 0u : 1u));
        CHECK(p.kernels.back().name == n.out.name());
        const std::map<std::string, double> sizes = {{n.rows.name(), rows}, {n.hidden.name(), c.hidden}};
        CHECK(lowered_error(n.out, s, random_inputs(n.out, sizes, 59), sizes) < bf16_tolerance);
      }
  }
  // The kernels compile: the mma datapath's for both targets, the fused Hopper kernel for sm_90a, its row
  // folds two quad shuffles.
  const QkvNormRope n = make_qkv_norm_rope(c, LayerType::sliding, "qkvc_");
  twist::testing::compile_for_both_targets(
      lower(n.out, schedule_qkv_norm_rope(n, GemmPlan{mma}), Target::sm80()));
  const HopperTiling head_wide{
      .block_m = 128, .block_n = c.head_dim, .block_k = 64, .warpgroups = 2, .stages = 2};
  const std::vector<Kernel> kernels =
      lower(n.out, schedule_qkv_norm_rope(n, GemmPlan{head_wide}), Target::sm90a()).kernels;
  REQUIRE(kernels.size() == 1);
  const std::string source = cuda::cuda_source(kernels[0]);
  CHECK(source.find("__shfl_xor_sync(0xffffffff") != std::string::npos);
  const cuda::CompileResult r =
      cuda::default_kernel_cache().compile(source, kernels[0].name + ".cu", {"sm_90a"});
  CHECK_MESSAGE(r.log.find("warning") == std::string::npos, r.log);
  CHECK_FALSE(r.cubin.empty());
}

TEST_CASE("gemma: the projection per head, a contraction batched over heads, is one batched Hopper GEMM") {
  // The layout the epilogue fusion of the head norms wants (apps/gemma/README.md): C(h, i, d) = sum over k of
  // y(i, k) W(k, h D + d) has the output's head, row and column as its own coordinates, so a head's norm is a
  // fold over the contraction's column dimension and its store is at the reduction's point ([H, B*S, D] is
  // attention's [B, H, S, D] at B 1). The batched schedule tiles it as it tiles a batched GEMM.
  const int D = 16, H = 8;
  SizeParam M("ph_M"), K("ph_K");
  const Input y("ph_A", bf16, {M, K}), w("ph_B", bf16, {K, Expr(H * D)});
  const RDom k({{0, K}}, "ph_k");
  Func C("ph_C"), out("ph_out");
  Var h("b"), i("i"), d("j");  // the batched GEMM schedule's loop names
  C(h, i, d) = reduce(algebra::sum(f32), k, cast(f32, y(i, k.x)) * cast(f32, w(k.x, h * D + d)));
  out(h, i, d) = cast(bf16, C(h, i, d));
  out.set_shape({Expr(H), M, Expr(D)});
  const Gemm batched = make_gemm({.input = bf16, .output = bf16, .batched = true, .prefix = "ph_"});
  const HopperTiling t{.block_m = 64, .block_n = D, .block_k = 64, .warpgroups = 1, .stages = 2};
  Schedule s;
  s.set_like(C, *GemmPlan{t}.schedule(batched).find(batched.C.name()));
  CHECK(lower(out, s, Target::sm90a()).kernels.size() == 1);
  const std::map<std::string, double> sizes = {{M.name(), 37}, {K.name(), 48}};
  CHECK(lowered_error(out, s, random_inputs(out, sizes, 3), sizes) < bf16_tolerance);
}

TEST_CASE("row folds: a per-head RMSNorm with a rotation fuses into the epilogue of a head-wide atom") {
  // out(h, i, d) = C(h, i, d) / rms(C(h, i, :)) + C(h, i, (d + 8) % D) over a contraction batched over heads
  // whose wgmma atom is one head wide: the sum of squares of a row is each lane's columns, then two quad
  // shuffles; the rotated column is another register of the same thread.
  const int D = 16, H = 3;
  SizeParam M("rf_M"), K("rf_K");
  const Input y("rf_A", bf16, {M, K}), w("rf_B", bf16, {K, Expr(H * D)}), scale("rf_scale", bf16, {Expr(D)});
  const RDom k({{0, K}}, "rf_k"), r({{0, D}}, "rf_r");
  Func C("rf_C"), ss("rf_ss"), out("rf_out");
  Var h("b"), i("i"), d("j");
  C(h, i, d) = reduce(algebra::sum(f32), k, cast(f32, y(i, k.x)) * cast(f32, w(k.x, h * D + d)));
  ss(h, i) = reduce(algebra::sum(f32), r, C(h, i, r.x) * C(h, i, r.x));
  out(h, i, d) = cast(
      bf16, C(h, i, d) * rsqrt(ss(h, i) / float(D) + 1e-6f) * cast(f32, scale(d)) + C(h, i, (d + 8) % D));
  out.set_shape({Expr(H), M, Expr(D)});
  const Gemm batched = make_gemm({.input = bf16, .output = bf16, .batched = true, .prefix = "rf_"});
  HopperTiling plain{.block_m = 64, .block_n = D, .block_k = 64, .warpgroups = 1, .stages = 2};
  plain.warp_specialized = false;
  plain.persistent_blocks = 0;
  plain.tma_store = false;
  for (const HopperTiling &t :
       {HopperTiling{.block_m = 128, .block_n = D, .block_k = 64, .warpgroups = 2, .stages = 2}, plain}) {
    INFO(GemmPlan{t}.name());
    Schedule s;
    s.set_like(C, *GemmPlan{t}.schedule(batched).find(batched.C.name()));
    const LoweredProgram p = lower(out, s, Target::sm90a());
    CHECK(p.kernels.size() == 1);
    CHECK(p.workspaces.empty());
    for (const int rows : {37, 8}) {
      const std::map<std::string, double> sizes = {{M.name(), rows}, {K.name(), 48}};
      CHECK(lowered_error(out, s, random_inputs(out, sizes, 5), sizes) < bf16_tolerance);
    }
  }
  // Refused, saying why and what to do: an atom narrower than the dimension (mma.sync's 8 columns, which
  // compute_root then lowers), a split reduction, a rotation that is not by whole groups of a quad's 8
  // columns.
  const GemmTiling mma{.block_m = 32, .block_n = D, .block_k = 32, .warp_m = 32, .warp_n = D, .stages = 2};
  Schedule narrow;
  narrow.set_like(C, *GemmPlan{mma}.schedule(batched).find(batched.C.name()));
  CHECK_THROWS_WITH(lower(out, narrow, Target::sm90a()), doctest::Contains("in one thread quad's registers"));
  narrow[C].compute_root();
  const std::map<std::string, double> sizes = {{M.name(), 37}, {K.name(), 48}};
  CHECK(lowered_error(out, narrow, random_inputs(out, sizes, 5), sizes) < bf16_tolerance);
  HopperTiling split = plain;
  split.split_k = 2;
  Schedule parts;
  parts.set_like(C, *GemmPlan{split}.schedule(batched).find(batched.C.name()));
  CHECK_THROWS_WITH(lower(out, parts, Target::sm90a()),
                    doctest::Contains("splits its reduction (split_reduction)"));
  Func odd("rf_odd");
  odd(h, i, d) = cast(bf16, C(h, i, d) * rsqrt(ss(h, i) / float(D) + 1e-6f) + C(h, i, (d + 4) % D));
  odd.set_shape({Expr(H), M, Expr(D)});
  Schedule s;
  s.set_like(C, *GemmPlan{plain}.schedule(batched).find(batched.C.name()));
  CHECK_THROWS_WITH(lower(odd, s, Target::sm90a()),
                    doctest::Contains("a rotation by a multiple of 8 columns"));
  // Without a rotation: the fold alone (an RMSNorm of each row), fused too.
  Func norm_ss("rf_norm_ss"), norm("rf_norm");
  const RDom whole({{0, D}}, "rf_r3");
  norm_ss(h, i) = reduce(algebra::sum(f32), whole, C(h, i, whole.x) * C(h, i, whole.x));
  norm(h, i, d) = cast(bf16, C(h, i, d) * rsqrt(norm_ss(h, i) / float(D) + 1e-6f));
  norm.set_shape({Expr(H), M, Expr(D)});
  CHECK(lower(norm, s, Target::sm90a()).kernels.size() == 1);
  CHECK(lowered_error(norm, s, random_inputs(norm, sizes, 7), sizes) < bf16_tolerance);
  Func half_ss("rf_half_ss"), half("rf_half");
  const RDom first_half({{0, D / 2}}, "rf_r2");
  half_ss(h, i) = reduce(algebra::sum(f32), first_half, C(h, i, first_half.x) * C(h, i, first_half.x));
  half(h, i, d) = cast(bf16, C(h, i, d) * rsqrt(half_ss(h, i) + 1e-6f));
  half.set_shape({Expr(H), M, Expr(D)});
  CHECK_THROWS_WITH(lower(half, s, Target::sm90a()), doctest::Contains("fold over the whole dimension"));
}

TEST_CASE("gemma: the residual add between two RMSNorms in one row kernel with two outputs") {
  const Config c = gemma4_tiny();
  const ResidualNorm n = make_residual_norm(bf16, c.hidden, c.eps, "rn_");
  const Schedule s = schedule_residual_norm(n);
  const LoweredProgram p = lower(n.out, s, Target::sm90a());
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.outputs.size() == 2);
  for (const double layer_scalar : {1.0, 0.75}) {
    const std::map<std::string, double> sizes = {{n.rows.name(), 9}, {n.layer_scalar.name(), layer_scalar}};
    INFO("layer_scalar ", layer_scalar);
    CHECK(lowered_error(n.out, s, random_inputs(n.out, sizes, 51), sizes) < bf16_tolerance);
  }
}

TEST_CASE("gemma: sliding-window and full attention, prefill and decode, GQA, scaled by 1") {
  const Config c = gemma4_tiny();
  for (const LayerType t : {LayerType::sliding, LayerType::full})
    for (const bool decode : {false, true}) {
      const Attention a = make_layer_attention(
          c, t, decode, std::string("at_") + to_string(t) + (decode ? "_decode" : "_prefill"));
      const int queries = decode ? 1 : 19, keys = decode ? 40 : 19;
      const Schedule s =
          schedule_layer_attention(a, {.batch = 2, .heads = c.heads, .queries = queries, .keys = keys});
      std::map<std::string, double> sizes = {{a.batch.name(), 2},
                                             {a.heads.name(), c.heads},
                                             {a.keys.name(), keys},
                                             {a.qk_scale.name(), qk_scale()}};
      if (!decode) sizes[a.queries.name()] = queries;
      INFO(to_string(t), decode ? " decode" : " prefill");
      CHECK(lowered_error(a.out, s, random_inputs(a.out, sizes, 61), sizes) < bf16_tolerance);
    }
}

TEST_CASE("gemma: the projections with the tiling the GEMM rule picks") {
  const Config c = gemma4_tiny();
  const LayerAttention la = layer_attention(c, LayerType::sliding);
  const int tokens = 20;
  struct Projection {
    const char *name;
    int n, k;
  };
  for (const Projection &pr :
       {Projection{"qkv", la.qkv_columns(c.heads), c.hidden},
        Projection{"o", c.hidden, c.heads * la.head_dim}, Projection{"down", c.hidden, c.intermediate}}) {
    const Gemm g = make_gemm({.input = bf16, .output = bf16, .prefix = std::string("pr_") + pr.name});
    const Schedule s = projection_plan(tokens, pr.n, pr.k).schedule(g);
    const std::map<std::string, double> sizes = {
        {g.M.name(), tokens}, {g.N.name(), pr.n}, {g.K.name(), pr.k}};
    INFO(pr.name);
    CHECK(lowered_error(g.out, s, random_inputs(g.out, sizes, 71), sizes) < bf16_tolerance);
  }
}

TEST_CASE("gemma: every kernel at the published 31B configuration lowers for sm_90a within its budgets") {
  const Config c = gemma4_31b();
  const GatedUp g = make_gated_up(bf16, c.hidden, c.intermediate, "big_gu_");
  for (const int rows : {2048, 8}) {
    const GemmPlan plan = projection_plan(rows, 2 * c.intermediate, c.hidden);
    CHECK(plan.hopper());
    CHECK(lower(g.out, schedule_gated_up(g, plan), Target::sm90a()).workspaces.empty() ==
          (std::get<HopperTiling>(plan.tiling).split_k == 1));
  }
  const ResidualNorm rn = make_residual_norm(bf16, c.hidden, c.eps, "big_rn_");
  CHECK(lower(rn.out, schedule_residual_norm(rn), Target::sm90a()).kernels.size() == 1);
  for (const LayerType t : {LayerType::sliding, LayerType::full}) {
    const LayerAttention la = layer_attention(c, t);
    const HeadNorm q = make_head_norm({.dtype = bf16,
                                       .heads = c.heads,
                                       .head_dim = la.head_dim,
                                       .columns = la.qkv_columns(c.heads),
                                       .first_column = 0,
                                       .eps = c.eps,
                                       .prefix = std::string("big_q_") + to_string(t)});
    CHECK(lower(q.out, schedule_head_norm(q), Target::sm90a()).kernels.size() == 1);
    // Prefill S2048: the rule's plan is one head wide in the sliding layers (heads of 256), and their norms
    // are its epilogue; the full layers' heads of 512 are wider than a wgmma atom.
    const QkvNormRope qkv = make_qkv_norm_rope(c, t, std::string("big_qkv_") + to_string(t) + "_");
    const GemmPlan prefill = projection_plan(2048, la.qkv_columns(c.heads), c.hidden);
    CHECK(qkv_norms_fuse(qkv, prefill) == (t == LayerType::sliding));
    CHECK(lower(qkv.out, schedule_qkv_norm_rope(qkv, prefill), Target::sm90a()).kernels.size() ==
          (t == LayerType::sliding ? 1u : 2u));
    for (const bool decode : {false, true}) {
      INFO(to_string(t), decode ? " decode" : " prefill");
      const Attention a = make_layer_attention(
          c, t, decode, std::string("big_at_") + to_string(t) + (decode ? "_decode" : "_prefill"));
      const LayerAttentionShape shape = {
          .batch = 1, .heads = c.heads, .queries = decode ? 1 : 8192, .keys = 8192};
      CHECK_FALSE(lower(a.out, schedule_layer_attention(a, shape), Target::sm90a()).kernels.empty());
    }
  }
}

TEST_CASE(
    "gemma: the bf16 gate_up GEMM, the residual norm and attention compile for sm_90a without spilling or "
    "warnings") {
  // ptxas's report through NVRTC: the gate, rounded to bf16 and used five times in each output of the
  // epilogue, once spilled 56 bytes at the prefill tiling's 168 registers. The front end's warnings: lets
  // whose last use a later pass took away ("variable "ji" was declared but never referenced"), shared
  // arrays' pointers that only their 32-bit addresses replace, and empty statements printed as "0;".
  const Config c = gemma4_31b();
  const GatedUp g = make_gated_up(bf16, c.hidden, c.intermediate, "spill_gu_");
  const ResidualNorm rn = make_residual_norm(bf16, c.hidden, c.eps, "spill_rn_");
  std::vector<Kernel> kernels = lower(rn.out, schedule_residual_norm(rn), Target::sm90a()).kernels;
  for (const int rows : {2048, 8}) {
    const GemmPlan plan = projection_plan(rows, 2 * c.intermediate, c.hidden);
    for (const Kernel &k : lower(g.out, schedule_gated_up(g, plan), Target::sm90a()).kernels)
      kernels.push_back(k);
  }
  const Attention a = make_layer_attention(c, LayerType::full, false, "spill_at");
  const LayerAttentionShape prefill{.batch = 1, .heads = c.heads, .queries = 2048, .keys = 2048};
  for (const Kernel &k : lower(a.out, schedule_layer_attention(a, prefill), Target::sm90a()).kernels)
    kernels.push_back(k);
  for (const Kernel &k : kernels) {
    INFO(k.name);
    const cuda::CompileResult result =
        cuda::default_kernel_cache().compile(cuda::cuda_source(k), k.name + ".cu", {"sm_90a"});
    CHECK_MESSAGE(result.log.find("warning") == std::string::npos, result.log);
    REQUIRE_FALSE(result.resources.empty());
    for (const cuda::KernelResources &r : result.resources) {
      INFO(r.kernel, ": ", r.registers, " registers");
      CHECK(r.spill_store_bytes == 0);
      CHECK(r.spill_load_bytes == 0);
    }
  }
}

TEST_CASE(
    "gemma: attention by the library's rules, the sliding layers skipping the tiles outside the window") {
  const Config c = gemma4_31b();
  const LayerAttentionShape prefill{.batch = 1, .heads = c.heads, .queries = 4096, .keys = 4096};
  const Attention sliding = make_layer_attention(c, LayerType::sliding, false, "rule_sliding");
  const Attention full = make_layer_attention(c, LayerType::full, false, "rule_full");
  const AttentionTiling s = attention_tiling(sliding, prefill), f = attention_tiling(full, prefill);
  CHECK(s.atom == MatrixAtom::wgmma);
  CHECK(f.atom == MatrixAtom::wgmma);
  CHECK(f.column_parts == 2);  // D 512: the output's columns over two warpgroups
  // The key loop of a block of 64 rows starting at row r begins at the tile of key r - 1023 (64-key tiles):
  // the tiles before the window are never visited; the full layers' loop begins at 0.
  const std::string windowed = cuda::cuda_source(
      lower(sliding.out, schedule_layer_attention(sliding, prefill), Target::sm90a()).kernels[0]);
  const std::string unwindowed =
      cuda::cuda_source(lower(full.out, schedule_layer_attention(full, prefill), Target::sm90a()).kernels[0]);
  CHECK(windowed.find("+ (-1023)) >> 6) + io), 0)") != std::string::npos);
  CHECK(unwindowed.find("(-1023)") == std::string::npos);
  // Decoding: split-KV by apps::decode_tiling, D 512 over two warps.
  const LayerAttentionShape step{.batch = 1, .heads = c.heads, .queries = 1, .keys = 32768};
  const AttentionTiling d =
      attention_tiling(make_layer_attention(c, LayerType::full, true, "rule_decode"), step);
  CHECK(d.split_kv > 1);
  CHECK(d.column_parts == 2);
}
