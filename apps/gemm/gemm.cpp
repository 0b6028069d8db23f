#include "apps/gemm/gemm.h"

#include <algorithm>

#include "algebra/builtins.h"
#include "scheduler/hopper_layouts.h"
#include "scheduler/target.h"

namespace twist::apps {

namespace {

Expr activation(Epilogue e, const Expr &x) {
  switch (e) {
    case Epilogue::none:
      return x;
    case Epilogue::bias_relu:
      return max(x, 0.0f);
    case Epilogue::bias_gelu:
      return gelu_tanh(x);
    case Epilogue::bias_silu:
      return x / (1.0f + exp(-x));
  }
  return x;
}

}  // namespace

Expr gelu_tanh(const Expr &x) {
  const Expr inner = 0.7978845608f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanh(inner));
}

Gemm make_gemm(const GemmOptions &o) {
  const std::string &p = o.prefix;
  SizeParam M(p + "M"), N(p + "N"), K(p + "K"), batch(p + "batch");
  std::vector<Expr> a_shape = {M, K}, b_shape = {K, N}, c_shape = {M, N};
  if (o.batched) {
    a_shape.insert(a_shape.begin(), batch);
    b_shape.insert(b_shape.begin(), batch);
    c_shape.insert(c_shape.begin(), batch);
  }
  Gemm g{o,
         M,
         N,
         K,
         batch,
         Input(p + "A", o.input, a_shape),
         Input(p + "B", o.input, b_shape),
         std::nullopt,
         std::nullopt,
         RDom({{0, K}}, p + "k"),
         Func(p + "C"),
         Func(p + "out")};
  Var b("b"), i("i"), j("j");
  const RVar k = g.k.x;
  const Monoid add = algebra::sum(f32);
  if (o.batched) {
    g.C(b, i, j) = reduce(add, g.k, cast(f32, g.A(b, i, k)) * cast(f32, g.B(b, k, j)));
  } else {
    g.C(i, j) = reduce(add, g.k, cast(f32, g.A(i, k)) * cast(f32, g.B(k, j)));
  }
  Expr value = o.batched ? Expr(g.C(b, i, j)) : Expr(g.C(i, j));
  if (o.epilogue != Epilogue::none) {
    g.bias.emplace(p + "bias", f32, std::vector<Expr>{N});
    g.alpha.emplace(p + "alpha");
    value = activation(o.epilogue, *g.alpha * value + (*g.bias)(j));
  }
  if (o.batched) {
    g.out(b, i, j) = cast(o.output, value);
  } else {
    g.out(i, j) = cast(o.output, value);
  }
  g.out.set_shape(c_shape);
  return g;
}

std::string GemmTiling::name() const {
  std::string s = fmt::format("mma_{}x{}x{}_w{}x{}_s{}_{}", block_m, block_n, block_k, warp_m, warp_n, stages,
                              transport == Transport::cp_async ? "cpasync" : "plain");
  if (accumulation.kind == Accumulation::Kind::f16) s += "_f16acc";
  if (accumulation.kind == Accumulation::Kind::hybrid)
    s += fmt::format("_hybrid{}", accumulation.promote_every);
  if (split_k > 1) s += fmt::format("_splitk{}", split_k);
  if (split_k > 1 && split_combine == SplitCombine::last_block) s += "_lastblock";
  if (min_blocks_per_sm > 1) s += fmt::format("_b{}", min_blocks_per_sm);
  return s;
}

Schedule schedule_tensor_core(const Gemm &g, const GemmTiling &t) {
  Schedule s;
  FuncSchedule &c = s[g.C];
  const std::string k = g.k.x.name();
  tile_for_mma(c, "i", "j", k, t.block_m, t.block_n, t.block_k, t.warp_m, t.warp_n)
      .stage(g.A, "ko", t.transport, t.stages, t.layout)
      .stage(g.B, "ko", t.transport, t.stages, t.layout)
      .accumulate(t.accumulation)
      .raster(t.raster_group)
      .min_blocks_per_sm(t.min_blocks_per_sm);
  if (g.options.batched) c.bind("b", Binding::block_z);
  if (t.split_k > 1) c.split_reduction("ko", t.split_k, t.split_combine);
  return s;
}

int HopperTiling::consumer_registers() const {
  // Registers the producer leaves, shared by the consumers' threads, in setmaxnreg's steps of 8 and no more
  // than a thread can address.
  const Target target = Target::sm90a();
  const int producer = producer_registers * hopper::kWarpgroupThreads;
  const int left = (target.registers_per_sm - producer) / (consumer_warpgroups() * hopper::kWarpgroupThreads);
  return std::min(left, target.max_registers_per_thread) / 8 * 8;
}

std::string HopperTiling::name() const {
  std::string s = fmt::format("wgmma_{}x{}x{}_wg{}_s{}_tma", block_m, block_n, block_k, warpgroups, stages);
  if (warp_specialized) s += "_ws";
  if (warp_specialized && persistent_blocks > 0) s += fmt::format("_p{}", persistent_blocks);
  if (cluster > 1) s += fmt::format("_cluster{}", cluster);
  if (accumulation.kind == Accumulation::Kind::f16) s += "_f16acc";
  if (accumulation.kind == Accumulation::Kind::hybrid)
    s += fmt::format("_hybrid{}", accumulation.promote_every);
  if (split_k > 1) s += fmt::format("_splitk{}", split_k);
  if (split_k > 1 && split_combine == SplitCombine::last_block) s += "_lastblock";
  if (stream_k) s += stream_k_tiles == StreamKTiles::tail ? "_streamktail" : "_streamk";
  if (!tma_store) s += "_rowstores";
  if (tma_store && stmatrix) s += "_stmatrix";
  if (tma_store && output_sub_tile_buffers) s += fmt::format("_subtile{}", output_sub_tile_buffers);
  if (ping_pong) s += "_pingpong";
  return s;
}

Schedule schedule_hopper(const Gemm &g, const HopperTiling &t) {
  Schedule s;
  FuncSchedule &c = s[g.C];
  const std::string k = g.k.x.name();
  c.tile("i", "j", "io", "jo", "ii", "ji", t.block_m, t.block_n)
      .split("ii", "iw", "im", t.block_m / t.warpgroups)
      .split("im", "imt", "ia", 64)
      .split(k, "ko", "kk", t.block_k)
      .split("kk", "kt", "ka", 16)
      .reorder({"ka", "ji", "ia", "imt", "kt", "ko", "iw"})
      .bind("io", Binding::block_y)
      .bind("jo", Binding::block_x)
      .bind("iw", Binding::warpgroup)
      .unroll("imt")
      .unroll("kt")
      .matrix_atom(MatrixAtom::wgmma, "ia", "ji", "ka")
      .stage(g.A, "ko", Transport::tma, t.stages)
      .stage(g.B, "ko", Transport::tma, t.stages)
      .accumulate(t.accumulation)
      .raster(t.raster_group);
  if (t.warp_specialized) c.warp_specialize({t.producer_registers, t.consumer_registers(), t.ping_pong});
  if (t.warp_specialized && t.persistent_blocks > 0) c.persistent(t.persistent_blocks);
  if (t.cluster > 1) c.cluster(t.cluster);
  if (t.tma_store)
    c.store_output(Transport::tma, t.stmatrix).store_output_sub_tiles(t.output_sub_tile_buffers);
  if (g.options.batched) c.bind("b", Binding::block_z);
  if (t.split_k > 1) c.split_reduction("ko", t.split_k, t.split_combine);
  if (t.stream_k) c.stream_k(true, t.stream_k_tiles);
  return s;
}

Schedule schedule_simt(const Gemm &g, int block, int thread_tile, int block_k) {
  Schedule s;
  const std::string k = g.k.x.name();
  s[g.C]
      .tile("i", "j", "io", "jo", "ii", "ji", block, block)
      .split("ii", "it", "ir", thread_tile)
      .split("ji", "jt", "jr", thread_tile)
      .split(k, "ko", "ki", block_k)
      .reorder({"jr", "ir", "ki", "ko", "jt", "it"})
      .bind("io", Binding::block_y)
      .bind("jo", Binding::block_x)
      .bind("it", Binding::thread)
      .bind("jt", Binding::thread);
  if (g.options.batched) s[g.C].bind("b", Binding::block_z);
  return s;
}

}  // namespace twist::apps
