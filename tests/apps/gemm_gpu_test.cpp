// GEMM programs on the GPU against independent references: a plain double loop (every element for small
// shapes, a random sample of elements for the benchmark's shapes) and the algorithm oracle.
#include <doctest/doctest.h>

#include <random>

#include "algebra/builtins.h"
#include "apps/gemm/gemm.h"
#include "apps/gemm/gemm_rule.h"
#include "backends/cuda/program/gpu_program.h"
#include "backends/reference/evaluate_funcs.h"
#include "scheduler/lower.h"
#include "tests/gpu_support.h"

using namespace twist;
using namespace twist::apps;
using reference::HostTensor;

namespace {

GemmTiling small_tiling() {
  GemmTiling t;
  t.block_m = 64, t.block_n = 64, t.block_k = 32, t.warp_m = 32, t.warp_n = 32;
  return t;
}

// The relative L2 error of `got` against a double loop over `samples` random points (all points if 0).
double sampled_error(const HostTensor &a, const HostTensor &b, const HostTensor &got, int samples,
                     uint64_t seed) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  std::mt19937_64 rng(seed);
  std::vector<std::pair<int64_t, int64_t>> points;
  if (samples == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) points.push_back({i, j});
  } else {
    for (int s = 0; s < samples; ++s) points.push_back({int64_t(rng() % m), int64_t(rng() % n)});
  }
  long double diff = 0, norm = 0;
  for (auto [i, j] : points) {
    long double c = 0;
    for (int64_t r = 0; r < k; ++r) c += static_cast<long double>(a.get({i, r})) * b.get({r, j});
    const double g = got.get({i, j});
    if (!std::isfinite(g)) return INFINITY;  // an unwritten (poisoned) or broken element
    diff += (g - c) * (g - c);
    norm += c * c;
  }
  return static_cast<double>(std::sqrt(diff / std::max(norm, 1e-300L)));
}

struct Shape {
  int m, n, k;
};

// `cluster`, when given, launches every kernel in thread-block clusters of that shape (its grid must divide).
double run_gemm(const Gemm &g, const Schedule &schedule, Shape s, int samples, uint64_t seed,
                std::array<int, 3> cluster = {1, 1, 1}) {
  static cuda::Device device;
  LoweredProgram p = lower(g.out, schedule, Target::sm90a());
  for (twist::Kernel &k : p.kernels) k.cluster = cluster;
  cuda::GpuProgram gpu(p, device);
  const HostTensor a = reference::random_normal(g.options.input, {s.m, s.k}, seed);
  const HostTensor b = reference::random_normal(g.options.input, {s.k, s.n}, seed + 1);
  const auto out = gpu.run({{g.A.name(), a}, {g.B.name(), b}});
  return sampled_error(a, b, out.at(g.out.name()), samples, seed + 2);
}

}  // namespace

TEST_CASE("GPU: tensor-core GEMM on odd shapes matches a double loop at every element") {
  TWIST_REQUIRE_GPU();
  for (const Type &type : {f16, bf16}) {
    Gemm g = make_gemm({.input = type, .output = f32, .prefix = type_name(type)});
    for (const GemmTiling &t : {small_tiling(), GemmTiling{}})
      for (Shape s : {Shape{127, 255, 61}, Shape{1, 1, 1}, Shape{64, 64, 40}, Shape{130, 72, 96},
                      Shape{257, 129, 1000}}) {
        INFO(type_name(type), " ", t.name(), " ", s.m, "x", s.n, "x", s.k);
        CHECK(run_gemm(g, schedule_tensor_core(g, t), s, 0, 17) < 1e-5);
      }
  }
}

TEST_CASE("GPU: tensor-core GEMM at the benchmark's shapes with f16 and bf16 outputs") {
  TWIST_REQUIRE_GPU();
  for (const Type &type : {f16, bf16}) {
    Gemm g = make_gemm({.input = type, .output = type, .prefix = type_name(type)});
    // Output rounding alone is 2^-11 (f16) or 2^-8 (bf16) relative.
    const double tolerance = type == f16 ? 2e-3 : 1e-2;
    for (Shape s :
         {Shape{1024, 1024, 1024}, Shape{2048, 2048, 2048}, Shape{4096, 4096, 4096}, Shape{8192, 8192, 8192},
          Shape{4096, 15360, 3840}, Shape{4096, 3840, 15360}, Shape{16, 15360, 3840}, Shape{1, 4096, 4096}}) {
      INFO(type_name(type), " ", s.m, "x", s.n, "x", s.k);
      CHECK(run_gemm(g, schedule_tensor_core(g, GemmTiling{}), s, 512, 5) < tolerance);
    }
  }
}

TEST_CASE("GPU: split-K and fused epilogues and batching and f16 or hybrid accumulation match the oracle") {
  TWIST_REQUIRE_GPU();
  static cuda::Device device;
  auto check = [&](const Func &out, const Schedule &s, const std::map<std::string, double> &scalars,
                   std::map<std::string, HostTensor> inputs, double tolerance) {
    const LoweredProgram p = lower(out, s, Target::sm90a());
    cuda::GpuProgram gpu(p, device);
    const auto got = gpu.run(inputs, scalars);
    const HostTensor want = reference::evaluate(out, {inputs, scalars}, Arithmetic::exact)[0];
    const HostTensor &g = got.at(out.name());
    HostTensor wide(f64, g.shape());
    for (int64_t e = 0; e < g.size(); ++e) wide.set_linear(e, g.get_linear(e));
    CHECK(reference::relative_l2_error(wide, want) < tolerance);
  };
  auto inputs_of = [](const Gemm &g, std::vector<int64_t> a, std::vector<int64_t> b, uint64_t seed) {
    std::map<std::string, HostTensor> in = {
        {g.A.name(), reference::random_normal(g.options.input, a, seed)},
        {g.B.name(), reference::random_normal(g.options.input, b, seed + 1)}};
    if (g.bias) in.emplace(g.bias->name(), reference::random_normal(f32, {b.back()}, seed + 2));
    return in;
  };
  {
    Gemm g = make_gemm({.input = f16, .output = f32, .prefix = "s"});
    for (SplitCombine combine : {SplitCombine::kernel, SplitCombine::atomic}) {
      GemmTiling t = small_tiling();
      t.split_k = 4;
      t.split_combine = combine;
      const Func &out = combine == SplitCombine::atomic ? g.C.set_shape({g.M, g.N}) : g.out;
      check(out, schedule_tensor_core(g, t), {}, inputs_of(g, {33, 2048}, {2048, 200}, 1), 1e-5);
    }
    for (Accumulation a : {Accumulation::fp16(), Accumulation::hybrid(4)}) {
      GemmTiling t = small_tiling();
      t.accumulation = a;
      check(g.out, schedule_tensor_core(g, t), {}, inputs_of(g, {200, 136}, {136, 72}, 2), 5e-3);
    }
  }
  for (Epilogue e : {Epilogue::bias_relu, Epilogue::bias_gelu, Epilogue::bias_silu}) {
    Gemm g = make_gemm({.input = bf16, .output = f32, .epilogue = e, .prefix = "e"});
    check(g.out, schedule_tensor_core(g, GemmTiling{}), {{g.alpha->name(), 0.5}},
          inputs_of(g, {300, 256}, {256, 200}, 3), 1e-5);
  }
  {
    Gemm g = make_gemm({.input = f16, .output = f32, .batched = true, .prefix = "b"});
    check(g.out, schedule_tensor_core(g, small_tiling()), {{g.batch.name(), 3}},
          inputs_of(g, {3, 70, 96}, {3, 96, 50}, 4), 1e-5);
  }
  {
    Gemm g = make_gemm({.input = f16, .output = f32, .prefix = "c"});
    check(g.out, schedule_simt(g, 64, 4, 16), {}, inputs_of(g, {100, 77}, {77, 90}, 5), 1e-5);
  }
}

TEST_CASE(
    "GPU: the schedule rule's picks match a double loop on skinny, odd and unaligned shapes in f16 and "
    "bf16") {
  TWIST_REQUIRE_GPU();
  for (const Type &type : {f16, bf16}) {
    Gemm g = make_gemm({.input = type, .output = f32, .prefix = "rule" + type_name(type)});
    // Every element of the small ones; a sample of the rest. The rule takes the Hopper schedule for all but
    // the last two (N or K not a multiple of 8: the mma.sync fallback); at M = 1 and 16 on 132 SMs, 64-row
    // blocks of 64x128x128, unsplit where N gives the SMs enough of them (64x14336x4096), else split
    // (1x4096x4096, 16x4096x14336).
    for (auto [s, samples] : {std::pair{Shape{1, 304, 2000}, 0}, std::pair{Shape{16, 104, 4096}, 0},
                              std::pair{Shape{100, 104, 104}, 0}, std::pair{Shape{1, 4096, 4096}, 512},
                              std::pair{Shape{16, 4096, 14336}, 512}, std::pair{Shape{64, 14336, 4096}, 512},
                              std::pair{Shape{777, 3336, 1240}, 512}, std::pair{Shape{3000, 5000, 2000}, 512},
                              std::pair{Shape{16, 5000, 3001}, 512}, std::pair{Shape{100, 100, 100}, 0}}) {
      const GemmPlan plan = gemm_plan_by_rule({s.m, s.n, s.k, 1, type});
      INFO(type_name(type), " ", plan.name(), " ", s.m, "x", s.n, "x", s.k);
      CHECK(plan.hopper() == (s.n % 8 == 0 && s.k % 8 == 0));
      CHECK(run_gemm(g, plan.schedule(g), s, samples, 23) < 1e-5);
    }
  }
}

TEST_CASE("GPU: a GEMM launched in clusters of two blocks through GpuProgram matches a double loop") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "thread-block clusters");
  Gemm g = make_gemm({.input = f16, .output = f32, .prefix = "cluster"});
  // 64x64 blocks over N = 256: four blocks in x, two clusters of two.
  CHECK(run_gemm(g, schedule_tensor_core(g, small_tiling()), Shape{100, 256, 96}, 0, 29, {2, 1, 1}) < 1e-5);
}

// SplitCombine::last_block: split-K with each tile's last block folding the parts in the same kernel, on
// the mma.sync and Hopper paths, at the skinny shapes split-K is for and odd ones (every element checked
// at the small shapes); small enough for the sanitizers.
TEST_CASE("GPU: split-K with each tile's last block folding matches a double loop") {
  TWIST_REQUIRE_GPU();
  Gemm g = make_gemm({.input = f16, .output = f16, .prefix = "lb"});
  GemmTiling mma = small_tiling();
  mma.split_k = 4;
  mma.split_combine = SplitCombine::last_block;
  HopperTiling hopper;
  hopper.block_m = 64, hopper.block_n = 64, hopper.block_k = 128, hopper.warpgroups = 1;
  hopper.persistent_blocks = 0;
  hopper.split_k = 4;
  hopper.split_combine = SplitCombine::last_block;
  for (Shape s : {Shape{1, 1024, 2048}, Shape{16, 1000, 1000}, Shape{33, 200, 2048}}) {
    INFO(s.m, "x", s.n, "x", s.k);
    CHECK(run_gemm(g, schedule_tensor_core(g, mma), s, 0, 31) < 2e-3);
    CHECK(run_gemm(g, schedule_hopper(g, hopper), s, 0, 32) < 2e-3);
  }
}

// Stream-K (HopperTiling::stream_k) at every element: tiles split into many parts (few tiles over the
// blocks) and into two (a wave of whole tiles first), uneven ranges, one and two consumer warpgroups, f16,
// bf16 and f32 outputs with the TMA-store epilogue running once on each folded tile. Few persistent blocks,
// so that the sanitizers finish.
TEST_CASE("GPU: stream-K on the persistent Hopper GEMM matches a double loop at every element") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "wgmma and TMA");
  HopperTiling two;  // 128 x 128 x 64, two consumer warpgroups, over 7 blocks
  two.block_n = 128, two.persistent_blocks = 7, two.stream_k = true;
  HopperTiling one = two;  // 64 x 128 x 128, one consumer warpgroup, over 5 blocks
  one.block_m = 64, one.block_k = 128, one.warpgroups = 1, one.persistent_blocks = 5;
  for (const Type &out : {f16, bf16, f32}) {
    Gemm g = make_gemm({.input = out == bf16 ? bf16 : f16, .output = out, .prefix = "sk" + type_name(out)});
    const double tolerance = out == f32 ? 1e-5 : out == f16 ? 2e-3 : 8e-3;
    // 12 tiles of 9 k-tiles on 7 blocks (1 to 3 parts); 25 tiles of 5 k-tiles (two waves of whole tiles,
    // then 11 tiles in ranges of 7 and 8); 4 tiles of 33 k-tiles on 5 blocks.
    for (const auto &[t, s] : {std::pair{two, Shape{333, 392, 520}}, std::pair{two, Shape{520, 600, 264}},
                               std::pair{one, Shape{100, 256, 4200}}}) {
      INFO(type_name(out), " ", t.name(), " ", s.m, "x", s.n, "x", s.k);
      CHECK(run_gemm(g, schedule_hopper(g, t), s, 0, 41) < tolerance);
    }
  }
}

// Stream-K at the rule's tiling on all 132 blocks: few tiles split into many parts, a sample of elements;
// the partial wave and a full wave split, or the partial wave alone (the full waves whole).
TEST_CASE("GPU: stream-K over 132 blocks of 128x256 tiles matches a double loop") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "wgmma and TMA");
  Gemm g = make_gemm({.input = f16, .output = f16, .prefix = "skwide"});
  for (const StreamKTiles tiles : {StreamKTiles::tail_and_wave, StreamKTiles::tail}) {
    HopperTiling wide;
    wide.stream_k = true;
    wide.stream_k_tiles = tiles;
    for (Shape s :
         {Shape{300, 520, 1000}, Shape{16, 4096, 4096}, Shape{2048, 5120, 5120}, Shape{2645, 1672, 9216}}) {
      INFO(wide.name(), " ", s.m, "x", s.n, "x", s.k);
      CHECK(run_gemm(g, schedule_hopper(g, wide), s, 2048, 43) < 2e-3);
    }
  }
}
