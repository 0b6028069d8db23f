// 64-bit offsets (scheduler/wide_offsets.h): a kernel whose buffers pass 2^31 - 1 elements at a launch runs
// the variant that addresses them in 64 bits, which compiles for both targets; kernels whose buffers cannot
// pass keep their source; and the 64-bit form, forced at small shapes, matches the oracle on the
// interpreter for every kind of global access (loads and stores, cp.async copies, atomic adds, arrival
// tickets).
#include <doctest/doctest.h>

#include <limits>

#include "algebra/builtins.h"
#include "apps/attention/attention.h"
#include "apps/gemm/gemm.h"
#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/cuda/runtime/kernel_cache.h"
#include "scheduler/arguments.h"
#include "scheduler/lower.h"
#include "scheduler/wide_offsets.h"
#include "tests/scheduler/attention_support.h"
#include "tests/scheduler/gemm_support.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using namespace twist::apps;
using twist::testing::attention_sizes;
using twist::testing::compile_for_both_targets;
using twist::testing::gemm_sizes;
using twist::testing::lowered_error;
using twist::testing::random_inputs;

namespace {

constexpr const char *kWide = "static_cast<long long>";

int64_t elements(const BufferArg &b, const Scalars &scalars) {
  int64_t n = 1;
  for (int64_t e : evaluate_shape(b.shape, scalars)) n *= e;
  return n;
}

void compile_both(const Kernel &k) {
  const std::string source = cuda::cuda_source(k);
  for (const char *arch : {"sm_80", "sm_90a"}) {
    const cuda::CompileResult r = cuda::default_kernel_cache().compile(source, k.name + ".cu", {arch});
    CHECK_MESSAGE(!r.cubin.empty(), k.name << " for " << arch);
  }
}

// Gemma 4's full layers decoding (heads of 512, 8 query heads to a KV head), scheduled by the decode rule.
struct GemmaDecode {
  Attention a = make_attention({.dtype = bf16, .head_dim = 512, .group = 8, .decode = true, .prefix = "wo"});
  LoweredProgram lowered(int batch, int keys) const {
    const AttentionTiling t = decode_tiling({.head_dim = 512,
                                             .group = 8,
                                             .batch_kv_heads = int64_t(batch) * 4,
                                             .keys = keys,
                                             .element_bytes = 2});
    return lower(a.out, schedule_decode(a, t), Target::sm90a());
  }
};

// y = x * w row by row, over `rows` x 4096 elements of constant extents.
struct ConstantRows {
  Input x, w;
  Var i{"i"}, j{"j"};
  Func y;
  explicit ConstantRows(int rows)
      : x("cr_x", bf16, {Expr(rows), Expr(4096)}), w("cr_w", bf16, {Expr(4096)}), y("cr_y") {
    y(i, j) = cast(bf16, cast(f32, x(i, j)) * cast(f32, w(j)));
    y.set_shape({Expr(rows), Expr(4096)});
  }
};

}  // namespace

TEST_CASE("decode at batch 64 over 32768 keys: K and V past 2^31 elements, addressed in 64 bits") {
  const GemmaDecode g;
  const LoweredProgram p = g.lowered(64, 32768);
  REQUIRE(p.kernels.size() == 2);  // the parts, then their combine
  const Kernel &parts = p.kernels[0];
  CHECK(parts.wide_offsets.empty());
  REQUIRE(parts.wide_variants);

  // Batch 8: every buffer under 2^31 elements, the kernel as lowered.
  const Scalars small = attention_sizes(g.a, 8, 32, 1, 32768);
  CHECK(&select_variant(parts, small) == &parts);
  // Batch 64: K and V hold 64 x 4 x 32768 x 512 = 2^32 elements each; Q, the output and the partial states
  // far fewer, and they keep 32-bit offsets.
  const Scalars big = attention_sizes(g.a, 64, 32, 1, 32768);
  CHECK_FALSE(offsets_fit(parts, big));
  const Kernel &wide = select_variant(parts, big);
  REQUIRE(&wide != &parts);
  CHECK(&select_variant(parts, big) == &wide);  // made once
  CHECK(wide.wide_offsets == std::vector<std::string>{g.a.K.name(), g.a.V.name()});
  for (const BufferArg &b : parts.buffers)
    CHECK_MESSAGE((elements(b, big) > std::numeric_limits<int32_t>::max()) ==
                      (b.name == g.a.K.name() || b.name == g.a.V.name()),
                  b.name);
  CHECK(offsets_fit(wide, big));
  CHECK(to_string(wide).find("64-bit offsets: " + g.a.K.name() + ", " + g.a.V.name()) != std::string::npos);
  // The combine reads the partial states only: it needs no variant.
  CHECK(&select_variant(p.kernels[1], big) == &p.kernels[1]);

  const std::string narrow_source = cuda::cuda_source(parts), wide_source = cuda::cuda_source(wide);
  CHECK(narrow_source.find(kWide) == std::string::npos);
  // Every copy from K or V computes its offset in 64 bits; Q's stay 32-bit.
  for (const std::string &buffer : {g.a.K.name(), g.a.V.name(), g.a.Q.name()}) {
    const std::string access = "&" + cuda::c_name(buffer) + "[";
    int accesses = 0;
    for (size_t at = wide_source.find(access); at != std::string::npos;
         at = wide_source.find(access, at + 1), ++accesses) {
      const std::string index = wide_source.substr(at, wide_source.find(']', at) - at);
      CHECK_MESSAGE((index.find(kWide) != std::string::npos) == (buffer != g.a.Q.name()), index);
    }
    CHECK(accesses > 0);
  }
  compile_both(wide);
}

TEST_CASE(
    "kernels whose buffers cannot pass 2^31 elements keep their source; constant extents past it widen") {
  // Constant extents under 2^31 elements: nothing to widen, at any launch.
  const ConstantRows small(1024);
  const LoweredProgram s = lower(small.y, Schedule(), Target::sm90a());
  for (const Kernel &k : s.kernels) {
    CHECK(k.wide_offsets.empty());
    CHECK_FALSE(k.wide_variants);
    CHECK(cuda::cuda_source(k).find(kWide) == std::string::npos);
  }
  // 2^20 rows of 4096: x and y hold 2^32 elements at every launch, so the kernel itself addresses them in
  // 64 bits; w stays on 32-bit offsets.
  const ConstantRows huge(1 << 20);
  const LoweredProgram h = lower(huge.y, Schedule(), Target::sm90a());
  for (const Kernel &k : h.kernels) {
    CHECK(k.wide_offsets == std::vector<std::string>{"cr_x", "cr_y"});
    CHECK_FALSE(k.wide_variants);
    CHECK(cuda::cuda_source(k).find(kWide) != std::string::npos);
    CHECK(offsets_fit(k, {}));
  }
  compile_for_both_targets(h);

  // Symbolic extents can pass: the GEMM keeps its source, with variants for the launches that need them.
  Gemm gemm = make_gemm({.input = f16, .output = f32});
  const LoweredProgram g = lower(gemm.out, schedule_tensor_core(gemm, GemmTiling{}), Target::sm90a());
  for (const Kernel &k : g.kernels) {
    CHECK(k.wide_offsets.empty());
    CHECK(k.wide_variants);
    CHECK(cuda::cuda_source(k).find(kWide) == std::string::npos);
    CHECK(&select_variant(k, gemm_sizes(gemm, 4096, 4096, 4096)) == &k);
  }
}

TEST_CASE(
    "the 64-bit form matches the oracle: copies, stores, atomics, tickets, split combines, row kernels") {
  // Forced at small shapes (force_wide_offsets): every buffer with symbolic extents addressed in 64 bits.
  Gemm g = make_gemm({.input = f16, .output = f32});
  const auto gemm_scalars = gemm_sizes(g, 70, 66, 200);
  const auto gemm_inputs = random_inputs(g.out, gemm_scalars, 3);
  GemmTiling t;
  t.block_m = 64, t.block_n = 64, t.block_k = 32, t.warp_m = 32, t.warp_n = 32, t.stages = 3;
  CHECK(lowered_error(g.out, schedule_tensor_core(g, t), gemm_inputs, gemm_scalars, {}, true) < 1e-5);
  t.split_k = 3;  // a combine kernel over a workspace
  CHECK(lowered_error(g.out, schedule_tensor_core(g, t), gemm_inputs, gemm_scalars, {}, true) < 1e-5);
  g.C.set_shape({g.M, g.N});
  t.split_combine = SplitCombine::atomic;  // atomic adds into the output
  CHECK(lowered_error(g.C, schedule_tensor_core(g, t), gemm_inputs, gemm_scalars, {}, true) < 1e-5);
  const LoweredProgram atomic = force_wide_offsets(lower(g.C, schedule_tensor_core(g, t), Target::sm90a()));
  const std::string atomic_source = cuda::cuda_source(atomic.kernels.back());
  const size_t add = atomic_source.find("atomicAdd(&");
  REQUIRE(add != std::string::npos);
  CHECK(atomic_source.substr(add, atomic_source.find(']', add) - add).find(kWide) != std::string::npos);

  // Stream-K: the parts and their arrival counters in workspaces, the last block folding them.
  Gemm h = make_gemm({.input = bf16, .output = f32, .prefix = "wo_sk"});
  HopperTiling sk;
  sk.block_m = 128, sk.block_n = 64, sk.stages = 2, sk.persistent_blocks = 5, sk.raster_group = 2;
  sk.stream_k = true;
  const auto sk_scalars = gemm_sizes(h, 100, 72, 200);
  CHECK(lowered_error(h.out, schedule_hopper(h, sk), random_inputs(h.out, sk_scalars, 61), sk_scalars, {},
                      true) < 1e-5);

  // Decode by the rule: the split over the keys and its combine.
  Attention a =
      make_attention({.dtype = bf16, .head_dim = 128, .group = 4, .decode = true, .prefix = "wo_d"});
  const AttentionTiling dt =
      decode_tiling({.head_dim = 128, .group = 4, .batch_kv_heads = 2, .keys = 777, .element_bytes = 2});
  const auto d_scalars = attention_sizes(a, 1, 8, 1, 777);
  const LoweredProgram decode = force_wide_offsets(lower(a.out, schedule_decode(a, dt), Target::sm90a()));
  for (const Kernel &k : decode.kernels) CHECK_FALSE(k.wide_offsets.empty());
  CHECK(lowered_error(a.out, schedule_decode(a, dt), random_inputs(a.out, d_scalars, 21), d_scalars, {},
                      true) < 1e-2);
  compile_for_both_targets(decode);

  // A row kernel: RMSNorm over rows of a symbolic count.
  SizeParam rows("wo_rows");
  Input x("wo_x", f16, {rows, Expr(77)}), w("wo_w", f16, {Expr(77)});
  Var i("i"), j("j");
  RDom r({{0, Expr(77)}}, "wo_r");
  Func ss("wo_ss"), y("wo_y");
  ss(i) = reduce(algebra::sum(f32), r, cast(f32, x(i, r.x)) * cast(f32, x(i, r.x)));
  y(i, j) = cast(f16, cast(f32, x(i, j)) * rsqrt(ss(i) / 77.0f + 1e-6f) * cast(f32, w(j)));
  y.set_shape({rows, Expr(77)});
  const std::map<std::string, double> sizes = {{"wo_rows", 5}};
  CHECK(lowered_error(y, Schedule(), random_inputs(y, sizes, 11), sizes, {}, true) < 2e-3);
}
