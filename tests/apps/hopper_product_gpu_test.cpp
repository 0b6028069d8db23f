// The Hopper intrinsics on the hardware: the hand-written TMA + mbarrier + wgmma products of the
// interpreter's tests (tests/reference/interpreter/hopper_kernels.h) run on the GPU, with their tensor maps
// encoded by the runtime, and must give the product the interpreter's layouts promise: the swizzle the TMA
// writes, the descriptors wgmma reads through, the accumulator and register-A fragments. Skipped without an
// sm_90 GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <tuple>

#include "algebra/builtins.h"
#include "apps/gemm/gemm.h"
#include "backends/cuda/program/gpu_program.h"
#include "backends/reference/evaluate_funcs.h"
#include "backends/reference/interpreter/interpreter.h"
#include "lang/float_formats.h"
#include "scheduler/lower.h"
#include "tests/gpu_support.h"
#include "tests/reference/interpreter/hopper_kernels.h"

using namespace twist::reference;
using namespace twist::reference::testing;

namespace {

// Exact for f32 accumulators (the values' products and sums are exact); f16 accumulators round inside each
// k-step in an order the hardware does not specify, so they are compared to a relative 2^-9.
void check_on_gpu(const HopperProduct &p) {
  const LoweredProgram program = program_of(p);
  const HostTensor A = dyadic(p.input, {p.m, p.k}, 1);
  const HostTensor B =
      dyadic(p.input, p.b_k_major ? std::vector<int64_t>{p.n, p.k} : std::vector<int64_t>{p.k, p.n}, 2);
  static twist::cuda::Device device;
  twist::cuda::GpuProgram gpu(program, device);
  const HostTensor D = gpu.run({{"A", A}, {"B", B}}).at("D");
  const HostTensor want = run_program(program, {{"A", A}, {"B", B}}, {}).at("D");
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t c = 0; c < p.n; ++c) {
      INFO("D[" << r << ", " << c << "]");
      if (p.accumulator == twist::f32)
        REQUIRE(D.get({r, c}) == want.get({r, c}));
      else
        REQUIRE(std::abs(D.get({r, c}) - want.get({r, c})) <= std::ldexp(std::abs(want.get({r, c})) + 1, -9));
    }
  }
}

}  // namespace

TEST_CASE("GPU: TMA + mbarrier + wgmma products match the interpreter's layouts") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA and wgmma");
  for (const int n : {64, 72, 256}) {
    INFO("MN-major B, N = " << n);
    check_on_gpu({.m = 64, .n = n});
  }
  for (const int n : {8, 56, 256}) {
    INFO("K-major B, N = " << n);
    check_on_gpu({.m = 64, .n = n, .b_k_major = true});
  }
  check_on_gpu({.m = 37, .n = 72});
  check_on_gpu({.m = 50, .n = 64, .input = twist::bf16});
  check_on_gpu({.m = 64, .n = 64, .a_in_registers = true});
  check_on_gpu({.m = 45, .n = 136, .a_in_registers = true, .input = twist::bf16});
  check_on_gpu({.m = 64, .n = 128, .accumulator = twist::f16});
}

namespace {

// The GPU's output of the program lowered for sm_90a and the oracle's (exact arithmetic) on the same inputs.
std::pair<HostTensor, HostTensor> gpu_and_oracle(const twist::Func &out, const twist::Schedule &s,
                                                 const std::map<std::string, double> &scalars,
                                                 const std::map<std::string, HostTensor> &inputs) {
  static twist::cuda::Device device;
  const LoweredProgram p = twist::lower(out, s, twist::Target::sm90a());
  twist::cuda::GpuProgram gpu(p, device);
  return {gpu.run(inputs, scalars).at(out.name()),
          evaluate(out, {inputs, scalars}, twist::Arithmetic::exact)[0]};
}

// The relative L2 error of the GPU's output against the oracle.
double hopper_gemm_error(const twist::Func &out, const twist::Schedule &s,
                         const std::map<std::string, double> &scalars,
                         const std::map<std::string, HostTensor> &inputs) {
  const auto [got, want] = gpu_and_oracle(out, s, scalars, inputs);
  HostTensor wide(twist::f64, got.shape());
  for (int64_t e = 0; e < got.size(); ++e) wide.set_linear(e, got.get_linear(e));
  return relative_l2_error(wide, want);
}

}  // namespace

TEST_CASE(
    "GPU: Hopper GEMM (TMA ring and wgmma) on odd shapes with epilogues and batching matches the oracle") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA and wgmma");
  using namespace twist::apps;
  struct Case {
    HopperTiling tiling;
    int m, n, k;
  };
  HopperTiling small, wide, tall, every_thread;
  small.block_m = 128, small.block_n = 64, small.stages = 2;
  wide.block_m = 128, wide.block_n = 256, wide.stages = 3;
  tall.block_m = 256, tall.block_n = 128, tall.stages = 3;  // two 64-row atoms per warpgroup
  every_thread.warp_specialized = false;                    // the other tilings have a producer warpgroup
  HopperTiling wide_every_thread = wide, persistent = wide, persistent_small = small;
  wide_every_thread.warp_specialized = false;
  persistent.persistent_blocks = 3;          // 10 tiles of the 513 x 392 product over 3 blocks
  persistent_small.persistent_blocks = 132;  // more blocks than tiles
  for (const twist::Type &type : {twist::f16, twist::bf16}) {
    Gemm g = make_gemm({.input = type, .output = twist::f32, .prefix = twist::type_name(type)});
    for (const Case &c :
         {Case{small, 100, 72, 200}, Case{small, 1, 8, 8}, Case{HopperTiling{}, 257, 136, 1000},
          Case{wide, 300, 264, 520}, Case{tall, 513, 392, 136}, Case{every_thread, 257, 136, 1000},
          Case{wide_every_thread, 300, 264, 520}, Case{persistent, 513, 392, 520},
          Case{persistent_small, 257, 136, 1000}}) {
      INFO(twist::type_name(type), " ", c.tiling.name(), " ", c.m, "x", c.n, "x", c.k);
      const std::map<std::string, double> scalars = {{g.M.name(), c.m}, {g.N.name(), c.n}, {g.K.name(), c.k}};
      const std::map<std::string, HostTensor> inputs = {{g.A.name(), random_normal(type, {c.m, c.k}, 1)},
                                                        {g.B.name(), random_normal(type, {c.k, c.n}, 2)}};
      CHECK(hopper_gemm_error(g.out, schedule_hopper(g, c.tiling), scalars, inputs) < 1e-5);
    }
  }
  {
    Gemm g = make_gemm(
        {.input = twist::bf16, .output = twist::f32, .epilogue = Epilogue::bias_silu, .prefix = "e"});
    const std::map<std::string, double> scalars = {
        {g.M.name(), 300}, {g.N.name(), 200}, {g.K.name(), 256}, {g.alpha->name(), 0.5}};
    const std::map<std::string, HostTensor> inputs = {{g.A.name(), random_normal(twist::bf16, {300, 256}, 3)},
                                                      {g.B.name(), random_normal(twist::bf16, {256, 200}, 4)},
                                                      {g.bias->name(), random_normal(twist::f32, {200}, 5)}};
    CHECK(hopper_gemm_error(g.out, schedule_hopper(g, small), scalars, inputs) < 1e-5);
  }
  {
    Gemm g = make_gemm({.input = twist::f16, .output = twist::f32, .batched = true, .prefix = "b"});
    const std::map<std::string, double> scalars = {
        {g.M.name(), 70}, {g.N.name(), 96}, {g.K.name(), 96}, {g.batch.name(), 3}};
    const std::map<std::string, HostTensor> inputs = {
        {g.A.name(), random_normal(twist::f16, {3, 70, 96}, 6)},
        {g.B.name(), random_normal(twist::f16, {3, 96, 96}, 7)}};
    CHECK(hopper_gemm_error(g.out, schedule_hopper(g, small), scalars, inputs) < 1e-5);
  }
}

namespace {

// The largest error of any element of the GPU's output against the oracle (exact arithmetic), relative to
// the element's magnitude plus one: a single element left unwritten or misplaced by the epilogue shows.
double hopper_gemm_worst_element(const twist::Func &out, const twist::Schedule &s,
                                 const std::map<std::string, double> &scalars,
                                 const std::map<std::string, HostTensor> &inputs) {
  const auto [got, want] = gpu_and_oracle(out, s, scalars, inputs);
  double worst = 0;
  for (int64_t e = 0; e < got.size(); ++e) {
    const double g = got.get_linear(e), w = want.get_linear(e);
    if (!std::isfinite(g)) return INFINITY;
    worst = std::max(worst, std::abs(g - w) / (std::abs(w) + 1));
  }
  return worst;
}

}  // namespace

TEST_CASE("GPU: Hopper GEMM's TMA-store epilogue (stmatrix or element writes) is right at every element") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA and wgmma");
  using namespace twist::apps;
  HopperTiling small, tall, persistent;
  small.block_m = 128, small.block_n = 64, small.stages = 2;
  tall.block_m = 256, tall.block_n = 128, tall.stages = 3;
  persistent.persistent_blocks = 3;  // 10 tiles of 513 x 392 over 3 blocks: the staging tile reused
  struct Case {
    HopperTiling tiling;
    int m, n, k;
  };
  for (const twist::Type &type : {twist::f16, twist::bf16})
    for (const bool stmatrix : {true, false}) {
      // One rounding to the output type: 2^-11 of the value for f16, 2^-8 for bf16.
      const double tolerance = type == twist::f16 ? 1.0 / 1024 : 1.0 / 128;
      Gemm g = make_gemm({.input = type, .output = type, .prefix = twist::type_name(type)});
      for (Case c : {Case{small, 100, 72, 200}, Case{small, 1, 8, 8}, Case{HopperTiling{}, 257, 136, 1000},
                     Case{tall, 513, 392, 136}, Case{persistent, 513, 392, 520}}) {
        c.tiling.stmatrix = stmatrix;
        INFO(twist::type_name(type), " ", c.tiling.name(), " ", c.m, "x", c.n, "x", c.k);
        const std::map<std::string, double> scalars = {
            {g.M.name(), c.m}, {g.N.name(), c.n}, {g.K.name(), c.k}};
        const std::map<std::string, HostTensor> inputs = {{g.A.name(), random_normal(type, {c.m, c.k}, 1)},
                                                          {g.B.name(), random_normal(type, {c.k, c.n}, 2)}};
        CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, c.tiling), scalars, inputs) < tolerance);
      }
    }
  // A fused epilogue reading a bias (its points outside the output are not computed), batching, and split-K
  // (whose partials are stored directly; the combine kernel writes the output), all with f16 outputs.
  {
    Gemm g = make_gemm(
        {.input = twist::f16, .output = twist::f16, .epilogue = Epilogue::bias_gelu, .prefix = "e"});
    const std::map<std::string, double> scalars = {
        {g.M.name(), 300}, {g.N.name(), 200}, {g.K.name(), 256}, {g.alpha->name(), 0.5}};
    const std::map<std::string, HostTensor> inputs = {{g.A.name(), random_normal(twist::f16, {300, 256}, 3)},
                                                      {g.B.name(), random_normal(twist::f16, {256, 200}, 4)},
                                                      {g.bias->name(), random_normal(twist::f32, {200}, 5)}};
    CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, persistent), scalars, inputs) < 1.0 / 1024);
  }
  {
    Gemm g = make_gemm({.input = twist::bf16, .output = twist::bf16, .batched = true, .prefix = "b"});
    const std::map<std::string, double> scalars = {
        {g.M.name(), 70}, {g.N.name(), 96}, {g.K.name(), 96}, {g.batch.name(), 3}};
    const std::map<std::string, HostTensor> inputs = {
        {g.A.name(), random_normal(twist::bf16, {3, 70, 96}, 6)},
        {g.B.name(), random_normal(twist::bf16, {3, 96, 96}, 7)}};
    CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, small), scalars, inputs) < 1.0 / 128);
  }
  {
    Gemm g = make_gemm({.input = twist::f16, .output = twist::f16, .prefix = "s"});
    HopperTiling split = small;
    split.split_k = 3;
    const std::map<std::string, double> scalars = {{g.M.name(), 257}, {g.N.name(), 136}, {g.K.name(), 1000}};
    const std::map<std::string, HostTensor> inputs = {
        {g.A.name(), random_normal(twist::f16, {257, 1000}, 8)},
        {g.B.name(), random_normal(twist::f16, {1000, 136}, 9)}};
    CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, split), scalars, inputs) < 1.0 / 1024);
  }
}

TEST_CASE("GPU: Hopper GEMM with the TMA-store epilogue on small problems (for the sanitizers)") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA and wgmma");
  using namespace twist::apps;
  // A persistent grid of 3 blocks over 12 tiles (the staging tile written again after each store) with
  // stmatrix, and the default 128 x 256 tiling with element writes, both clipped at odd edges.
  HopperTiling small;
  small.block_m = 128, small.block_n = 64, small.stages = 2, small.persistent_blocks = 3;
  small.stmatrix = true;
  HopperTiling elements;
  elements.stmatrix = false;
  Gemm g = make_gemm({.input = twist::f16, .output = twist::f16});
  for (const auto &[tiling, m, n, k] :
       {std::tuple{small, 300, 200, 136}, std::tuple{elements, 257, 136, 200}}) {
    INFO(tiling.name(), " ", m, "x", n, "x", k);
    const std::map<std::string, double> scalars = {{g.M.name(), m}, {g.N.name(), n}, {g.K.name(), k}};
    const std::map<std::string, HostTensor> inputs = {{g.A.name(), random_normal(twist::f16, {m, k}, 1)},
                                                      {g.B.name(), random_normal(twist::f16, {k, n}, 2)}};
    CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, tiling), scalars, inputs) < 1.0 / 1024);
  }
}

TEST_CASE(
    "GPU: Hopper GEMM's sub-tiled TMA-store epilogue (4 stages, 2 box buffers) is right at every element") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA and wgmma");
  using namespace twist::apps;
  // The 128 x 256 tiling with 4 stages beside 2 buffers of 128 x 64: 4 boxes a tile in turn; persistent
  // over 3 blocks, so the buffers are written again after their stores read them, across tiles; odd edges.
  HopperTiling sub_tiled;
  sub_tiled.stages = 4, sub_tiled.output_sub_tile_buffers = 2, sub_tiled.persistent_blocks = 3;
  for (const twist::Type &type : {twist::f16, twist::bf16}) {
    const double tolerance = type == twist::f16 ? 1.0 / 1024 : 1.0 / 128;
    Gemm g = make_gemm({.input = type, .output = type, .prefix = twist::type_name(type)});
    for (const auto &[m, n, k] : {std::tuple{513, 1000, 520}, std::tuple{257, 136, 200}}) {
      INFO(twist::type_name(type), " ", sub_tiled.name(), " ", m, "x", n, "x", k);
      const std::map<std::string, double> scalars = {{g.M.name(), m}, {g.N.name(), n}, {g.K.name(), k}};
      const std::map<std::string, HostTensor> inputs = {{g.A.name(), random_normal(type, {m, k}, 1)},
                                                        {g.B.name(), random_normal(type, {k, n}, 2)}};
      CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, sub_tiled), scalars, inputs) < tolerance);
    }
  }
}

TEST_CASE("GPU: clustered Hopper GEMM (TMA multicast of B in 2-block clusters) is right at every element") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA multicast and clusters");
  using namespace twist::apps;
  // The default 128 x 256 tiling in clusters, and small 128 x 128 tiles over 4 persistent blocks (many tiles
  // a cluster, the ring's phases carried across them); odd shapes whose row tiles are odd in number (the
  // cluster's second tile wholly past the edge) or end in a partial tile; f16 and bf16; a batch.
  HopperTiling big;
  big.cluster = 2;
  HopperTiling small = big;
  small.block_n = 128, small.stages = 2, small.persistent_blocks = 4, small.raster_group = 2;
  for (const twist::Type &type : {twist::f16, twist::bf16}) {
    const double tolerance = type == twist::f16 ? 1.0 / 1024 : 1.0 / 128;
    Gemm g = make_gemm({.input = type, .output = type, .prefix = twist::type_name(type)});
    for (const auto &[tiling, m, n, k] :
         {std::tuple{big, 300, 264, 200}, std::tuple{big, 1000, 520, 1000}, std::tuple{small, 513, 392, 520},
          std::tuple{small, 130, 72, 136}, std::tuple{small, 1, 8, 8}}) {
      INFO(twist::type_name(type), " ", tiling.name(), " ", m, "x", n, "x", k);
      const std::map<std::string, double> scalars = {{g.M.name(), m}, {g.N.name(), n}, {g.K.name(), k}};
      const std::map<std::string, HostTensor> inputs = {{g.A.name(), random_normal(type, {m, k}, 1)},
                                                        {g.B.name(), random_normal(type, {k, n}, 2)}};
      CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, tiling), scalars, inputs) < tolerance);
    }
  }
  Gemm g = make_gemm({.input = twist::f16, .output = twist::f16, .batched = true, .prefix = "b"});
  const std::map<std::string, double> scalars = {
      {g.M.name(), 200}, {g.N.name(), 136}, {g.K.name(), 96}, {g.batch.name(), 3}};
  const std::map<std::string, HostTensor> inputs = {{g.A.name(), random_normal(twist::f16, {3, 200, 96}, 6)},
                                                    {g.B.name(), random_normal(twist::f16, {3, 96, 136}, 7)}};
  CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, small), scalars, inputs) < 1.0 / 1024);
}

TEST_CASE("GPU: clustered Hopper GEMM on a small problem (for the sanitizers)") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA multicast and clusters");
  using namespace twist::apps;
  HopperTiling small;
  small.block_n = 128, small.stages = 2, small.persistent_blocks = 4, small.raster_group = 2,
  small.cluster = 2;
  Gemm g = make_gemm({.input = twist::f16, .output = twist::f16});
  const int m = 300, n = 200, k = 136;
  const std::map<std::string, double> scalars = {{g.M.name(), m}, {g.N.name(), n}, {g.K.name(), k}};
  const std::map<std::string, HostTensor> inputs = {{g.A.name(), random_normal(twist::f16, {m, k}, 1)},
                                                    {g.B.name(), random_normal(twist::f16, {k, n}, 2)}};
  CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, small), scalars, inputs) < 1.0 / 1024);
}

namespace {

// Ping-pong (HopperTiling::ping_pong): two consumer warpgroups, each with 128 x 128 tiles of its own, taking
// a persistent block's tiles in turn (the exported kernel), or 128 x 64 tiles over a few blocks whose tile
// counts are even and odd (the second warpgroup with as many tiles as the first, one fewer, or none).
twist::apps::HopperTiling ping_pong_tiling(int block_n, int stages, int blocks) {
  twist::apps::HopperTiling t;
  t.block_m = 128, t.block_n = block_n, t.warpgroups = 1, t.stages = stages;
  t.persistent_blocks = blocks, t.ping_pong = true;
  return t;
}

}  // namespace

TEST_CASE("GPU: ping-pong Hopper GEMM (each consumer warpgroup its own tiles) is right at every element") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA and wgmma");
  using namespace twist::apps;
  const HopperTiling exported = ping_pong_tiling(128, 4, 132);
  struct Case {
    HopperTiling tiling;
    int m, n, k;
  };
  for (const twist::Type &type : {twist::f16, twist::bf16})
    for (const bool stmatrix : {true, false}) {
      const double tolerance = type == twist::f16 ? 1.0 / 1024 : 1.0 / 128;
      Gemm g = make_gemm({.input = type, .output = type, .prefix = twist::type_name(type)});
      // 20 tiles: one a block over 132 blocks (the second warpgroup idle), 4 a block over 5.
      for (Case c : {Case{exported, 513, 392, 520}, Case{ping_pong_tiling(128, 4, 5), 513, 392, 520},
                     Case{exported, 1, 8, 8}, Case{ping_pong_tiling(64, 2, 3), 300, 200, 136},
                     Case{ping_pong_tiling(64, 2, 5), 300, 200, 200}}) {
        c.tiling.stmatrix = stmatrix;
        INFO(twist::type_name(type), " ", c.tiling.name(), " ", c.m, "x", c.n, "x", c.k);
        const std::map<std::string, double> scalars = {
            {g.M.name(), c.m}, {g.N.name(), c.n}, {g.K.name(), c.k}};
        const std::map<std::string, HostTensor> inputs = {{g.A.name(), random_normal(type, {c.m, c.k}, 1)},
                                                          {g.B.name(), random_normal(type, {c.k, c.n}, 2)}};
        CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, c.tiling), scalars, inputs) < tolerance);
      }
    }
  // A fused epilogue reading a bias, a batch, and split-K (partials stored directly, combined by a second
  // kernel).
  {
    Gemm g = make_gemm(
        {.input = twist::f16, .output = twist::f16, .epilogue = Epilogue::bias_gelu, .prefix = "e"});
    const std::map<std::string, double> scalars = {
        {g.M.name(), 300}, {g.N.name(), 200}, {g.K.name(), 256}, {g.alpha->name(), 0.5}};
    const std::map<std::string, HostTensor> inputs = {{g.A.name(), random_normal(twist::f16, {300, 256}, 3)},
                                                      {g.B.name(), random_normal(twist::f16, {256, 200}, 4)},
                                                      {g.bias->name(), random_normal(twist::f32, {200}, 5)}};
    CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, ping_pong_tiling(64, 2, 3)), scalars, inputs) <
          1.0 / 1024);
  }
  {
    Gemm g = make_gemm({.input = twist::bf16, .output = twist::bf16, .batched = true, .prefix = "b"});
    const std::map<std::string, double> scalars = {
        {g.M.name(), 200}, {g.N.name(), 136}, {g.K.name(), 96}, {g.batch.name(), 3}};
    const std::map<std::string, HostTensor> inputs = {
        {g.A.name(), random_normal(twist::bf16, {3, 200, 96}, 6)},
        {g.B.name(), random_normal(twist::bf16, {3, 96, 136}, 7)}};
    CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, ping_pong_tiling(64, 2, 5)), scalars, inputs) <
          1.0 / 128);
  }
  {
    Gemm g = make_gemm({.input = twist::f16, .output = twist::f16, .prefix = "s"});
    HopperTiling split = ping_pong_tiling(64, 2, 5);
    split.split_k = 3;
    const std::map<std::string, double> scalars = {{g.M.name(), 257}, {g.N.name(), 136}, {g.K.name(), 1000}};
    const std::map<std::string, HostTensor> inputs = {
        {g.A.name(), random_normal(twist::f16, {257, 1000}, 8)},
        {g.B.name(), random_normal(twist::f16, {1000, 136}, 9)}};
    CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, split), scalars, inputs) < 1.0 / 1024);
  }
}

TEST_CASE("GPU: ping-pong Hopper GEMM on a small problem (for the sanitizers)") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA and wgmma");
  using namespace twist::apps;
  // 24 tiles of 128 x 128 over 5 blocks (4 or 5 tiles a block), stmatrix into each warpgroup's own tile.
  HopperTiling t = ping_pong_tiling(128, 4, 5);
  t.stmatrix = true;
  Gemm g = make_gemm({.input = twist::f16, .output = twist::f16});
  const int m = 700, n = 520, k = 264;
  const std::map<std::string, double> scalars = {{g.M.name(), m}, {g.N.name(), n}, {g.K.name(), k}};
  const std::map<std::string, HostTensor> inputs = {{g.A.name(), random_normal(twist::f16, {m, k}, 1)},
                                                    {g.B.name(), random_normal(twist::f16, {k, n}, 2)}};
  CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, t), scalars, inputs) < 1.0 / 1024);
}

TEST_CASE("GPU: ping-pong Hopper GEMM in 2-block clusters (B multicast) is right at every element") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA multicast and clusters");
  using namespace twist::apps;
  // 20 and 24 tiles of 128 x 128 over 4 blocks in 2 clusters; the last row pairs' second tiles past the edge.
  HopperTiling t = ping_pong_tiling(128, 4, 4);
  t.cluster = 2, t.raster_group = 2;
  for (const twist::Type &type : {twist::f16, twist::bf16}) {
    const double tolerance = type == twist::f16 ? 1.0 / 1024 : 1.0 / 128;
    Gemm g = make_gemm({.input = type, .output = type, .prefix = twist::type_name(type)});
    for (const auto &[m, n, k] : {std::tuple{300, 520, 136}, std::tuple{513, 392, 520}}) {
      INFO(twist::type_name(type), " ", t.name(), " ", m, "x", n, "x", k);
      const std::map<std::string, double> scalars = {{g.M.name(), m}, {g.N.name(), n}, {g.K.name(), k}};
      const std::map<std::string, HostTensor> inputs = {{g.A.name(), random_normal(type, {m, k}, 1)},
                                                        {g.B.name(), random_normal(type, {k, n}, 2)}};
      CHECK(hopper_gemm_worst_element(g.out, schedule_hopper(g, t), scalars, inputs) < tolerance);
    }
  }
}
