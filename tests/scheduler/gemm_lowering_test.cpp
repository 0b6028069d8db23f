// GEMM through the whole lowering: tensor-core and CUDA-core schedules, tails, split reductions, fused
// epilogues, each run on the interpreter against the oracle and compiled for both targets.
#include <doctest/doctest.h>

#include "algebra/builtins.h"
#include "apps/gemm/gemm.h"
#include "scheduler/lower.h"
#include "tests/scheduler/gemm_support.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using namespace twist::apps;
using twist::testing::gemm_sizes;
using Shape = twist::testing::GemmShape;
using twist::testing::compile_for_both_targets;
using twist::testing::lowered_error;
using twist::testing::random_inputs;

namespace {

// A small tensor-core tiling, so that odd shapes have several blocks, warps and k-tiles on the interpreter.
GemmTiling small_tiling() {
  GemmTiling t;
  t.block_m = 64, t.block_n = 64, t.block_k = 32, t.warp_m = 32, t.warp_n = 32, t.stages = 3;
  return t;
}

}  // namespace

TEST_CASE("tensor-core GEMM matches the oracle on odd shapes, f16 and bf16") {
  for (const Type &type : {f16, bf16}) {
    Gemm g = make_gemm({.input = type, .output = f32});
    const Schedule s = schedule_tensor_core(g, small_tiling());
    // (K = 200 and 224: k-tiles copied without guards before a guarded tail, in edge blocks and inner ones.)
    for (const Shape shape : {Shape{127, 255, 61}, Shape{1, 1, 1}, Shape{64, 64, 40}, Shape{130, 72, 96},
                              Shape{70, 100, 200}, Shape{128, 64, 224}}) {
      const auto scalars = gemm_sizes(g, shape.m, shape.n, shape.k);
      const double err = lowered_error(g.out, s, random_inputs(g.out, scalars, 7), scalars);
      INFO(type_name(type), " ", shape.m, "x", shape.n, "x", shape.k);
      // f32 accumulation of exact products: only the order of the sums differs from the oracle.
      CHECK(err < 1e-5);
    }
  }
}

TEST_CASE("tensor-core GEMM kernels compile for sm_80 and sm_90a with the instructions they ask for") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  GemmTiling big;  // the benchmark's tiling
  for (const GemmTiling &t : {small_tiling(), big}) {
    const LoweredProgram p = lower(g.out, schedule_tensor_core(g, t), Target::sm90a());
    const std::vector<std::string> sources = compile_for_both_targets(p);
    REQUIRE(!sources.empty());
    CHECK(sources[0].find("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") != std::string::npos);
    CHECK(sources[0].find("ldmatrix.sync.aligned.m8n8.x4.shared.b16") != std::string::npos);
    CHECK(sources[0].find("cp.async.cg.shared.global") != std::string::npos);
    CHECK(sources[0].find("cp.async.wait_group") != std::string::npos);
  }
}

TEST_CASE("f16 and hybrid accumulation lower to f16 atoms and stay close to the oracle") {
  Gemm g = make_gemm({.input = f16, .output = f32});
  const auto scalars = gemm_sizes(g, 96, 80, 256);
  const auto inputs = random_inputs(g.out, scalars, 11);
  GemmTiling t = small_tiling();
  t.accumulation = Accumulation::fp32();
  const double fp32 = lowered_error(g.out, schedule_tensor_core(g, t), inputs, scalars);
  t.accumulation = Accumulation::fp16();
  const double fp16 = lowered_error(g.out, schedule_tensor_core(g, t), inputs, scalars);
  t.accumulation = Accumulation::hybrid(2);
  const double hybrid = lowered_error(g.out, schedule_tensor_core(g, t), inputs, scalars);
  INFO("fp32 ", fp32, " fp16 ", fp16, " hybrid ", hybrid);
  CHECK(fp32 < 1e-5);
  // f16 partial sums of 256 products of N(0,1) values round at 2^-11 relative: well above f32's error.
  CHECK(fp16 > 10 * fp32);
  CHECK(fp16 < 5e-3);
  // Promoting every 2 k-steps (32 products) keeps the f16 partials short: between the two.
  CHECK(hybrid < fp16);
  CHECK(hybrid > fp32);
  const LoweredProgram p = lower(g.out, schedule_tensor_core(g, t), Target::sm90a());
  const auto sources = compile_for_both_targets(p);
  CHECK(sources[0].find("mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16") != std::string::npos);
}

TEST_CASE("split-K through a combine kernel and through atomics matches the oracle") {
  Gemm g = make_gemm({.input = f16, .output = f32});
  const auto scalars = gemm_sizes(g, 70, 66, 200);
  const auto inputs = random_inputs(g.out, scalars, 3);
  GemmTiling t = small_tiling();
  t.split_k = 3;
  const double kernel = lowered_error(g.out, schedule_tensor_core(g, t), inputs, scalars);
  CHECK(kernel < 1e-5);
  LoweredProgram p = lower(g.out, schedule_tensor_core(g, t), Target::sm90a());
  CHECK(p.kernels.size() == 2);
  compile_for_both_targets(p);

  // Atomics need the sum stored as it is: schedule the product itself as the output.
  g.C.set_shape({g.M, g.N});
  t.split_combine = SplitCombine::atomic;
  const double atomic = lowered_error(g.C, schedule_tensor_core(g, t), inputs, scalars);
  CHECK(atomic < 1e-5);
  p = lower(g.C, schedule_tensor_core(g, t), Target::sm90a());
  const auto sources = compile_for_both_targets(p);
  CHECK(sources.back().find("atomicAdd") != std::string::npos);
}

TEST_CASE("a fused bias + activation epilogue and a batched GEMM match the oracle") {
  for (Epilogue e : {Epilogue::bias_relu, Epilogue::bias_gelu, Epilogue::bias_silu}) {
    Gemm g = make_gemm({.input = bf16, .output = f32, .epilogue = e});
    auto scalars = gemm_sizes(g, 65, 90, 48);
    scalars[g.alpha->name()] = 0.75;
    const double err = lowered_error(g.out, schedule_tensor_core(g, small_tiling()),
                                     random_inputs(g.out, scalars, 5), scalars);
    CHECK(err < 1e-5);
  }
  Gemm g = make_gemm({.input = f16, .output = f32, .batched = true});
  auto scalars = gemm_sizes(g, 40, 33, 24);
  scalars[g.batch.name()] = 3;
  CHECK(lowered_error(g.out, schedule_tensor_core(g, small_tiling()), random_inputs(g.out, scalars, 9),
                      scalars) < 1e-5);
}

TEST_CASE("CUDA-core schedules fold any monoid: plain and max-plus GEMMs") {
  Gemm g = make_gemm({.input = f16, .output = f32});
  const auto scalars = gemm_sizes(g, 67, 45, 37);
  const Schedule s = schedule_simt(g, 32, 4, 8);
  CHECK(lowered_error(g.out, s, random_inputs(g.out, scalars, 21), scalars) < 1e-5);
  compile_for_both_targets(lower(g.out, s, Target::sm90a()));

  // The same schedule over (max, +): a shortest-path style product, which tensor cores cannot do.
  SizeParam M("mp_M"), N("mp_N"), K("mp_K");
  Input A("mp_A", f32, {M, K}), B("mp_B", f32, {K, N});
  Var i("i"), j("j");
  RDom k({{0, K}}, "mp_k");
  Func C("mp_C");
  C(i, j) = reduce(algebra::max(f32), k, A(i, k.x) + B(k.x, j));
  C.set_shape({M, N});
  Schedule m;
  m[C].tile("i", "j", "io", "jo", "ii", "ji", 32, 32)
      .split("ii", "it", "ir", 4)
      .split("ji", "jt", "jr", 4)
      .split("mp_k.x", "ko", "ki", 8)
      .reorder({"jr", "ir", "ki", "ko", "jt", "it"})
      .bind("io", Binding::block_y)
      .bind("jo", Binding::block_x)
      .bind("it", Binding::thread)
      .bind("jt", Binding::thread)
      .stage(A, "ko", Transport::cp_async, 2)
      .stage(B, "ko", Transport::cp_async, 2);
  const std::map<std::string, double> mp = {{"mp_M", 50}, {"mp_N", 70}, {"mp_K", 29}};
  // Only the f32 additions round (the oracle adds in double); max picks without rounding.
  CHECK(lowered_error(C, m, random_inputs(C, mp, 4), mp) < 1e-7);
  compile_for_both_targets(lower(C, m, Target::sm90a()));
}

TEST_CASE("output tiles go out through shared memory, unless they would not fit it") {
  Gemm g = make_gemm({.input = f16, .output = f32});
  // 64 x 64 f32 tiles (16 KB) are written back; 256 x 256 ones (256 KB) exceed the H200's 227 KB and are
  // stored directly, while the same schedule's staged inputs (2 x 32 KB) fit.
  GemmTiling huge;
  huge.block_m = huge.block_n = 256, huge.stages = 2;
  for (const auto &[tiling, written_back] : {std::pair{small_tiling(), true}, std::pair{huge, false}}) {
    const LoweredProgram p = lower(g.out, schedule_tensor_core(g, tiling), Target::sm90a());
    const Kernel &k = p.kernels.front();
    INFO(tiling.name());
    CHECK((k.schedule_summary.find("written back") != std::string::npos) == written_back);
    CHECK(k.shared_bytes <= Target::sm90a().max_shared_bytes_per_block);
  }
  const auto scalars = gemm_sizes(g, 300, 260, 48);
  const double err =
      lowered_error(g.out, schedule_tensor_core(g, huge), random_inputs(g.out, scalars, 9), scalars);
  CHECK(err < 1e-5);
}
