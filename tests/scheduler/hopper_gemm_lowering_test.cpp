// The Hopper GEMM through the general lowering: TMA stages in a ring of mbarrier-guarded slots and wgmma
// atoms, run on the interpreter at small odd shapes against the oracle, and compiled for sm_90a with the
// instructions the schedule asks for.
#include <doctest/doctest.h>

#include "apps/gemm/gemm.h"
#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/cuda/runtime/kernel_cache.h"
#include "scheduler/lower.h"
#include "tests/error_capture.h"
#include "tests/scheduler/gemm_support.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using namespace twist::apps;
using twist::testing::gemm_sizes;
using Shape = twist::testing::GemmShape;
using twist::testing::lowered_error;
using twist::testing::random_inputs;

TEST_CASE(
    "Hopper GEMM (TMA ring, wgmma) matches the oracle on odd shapes, f16 and bf16, warp-specialized or not") {
  for (const bool specialized : {true, false})
    for (const Type &type : {f16, bf16}) {
      Gemm g = make_gemm({.input = type, .output = f32});
      HopperTiling t;
      t.block_m = 128, t.block_n = 64, t.warpgroups = 2, t.stages = 2;
      t.warp_specialized = specialized;
      const Schedule s = schedule_hopper(g, t);
      // K = 200: a last k-tile mostly past the edge (TMA's zero fill); 5 k-tiles through a 2-slot ring.
      for (const Shape shape : {Shape{100, 72, 200}, Shape{130, 64, 64}, Shape{8, 8, 8}}) {
        const auto scalars = gemm_sizes(g, shape.m, shape.n, shape.k);
        const double err = lowered_error(g.out, s, random_inputs(g.out, scalars, 7), scalars);
        INFO(type_name(type), " ", shape.m, "x", shape.n, "x", shape.k,
             specialized ? " warp-specialized" : "");
        CHECK(err < 1e-5);
      }
    }
}

TEST_CASE("warp-specialized Hopper GEMM: one or two consumer warpgroups, rings that wrap many times") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling t;
  t.block_m = 128, t.block_n = 128, t.warpgroups = 1, t.stages = 3;  // one consumer with two 64-row atoms
  const auto scalars = gemm_sizes(g, 150, 136, 584);                 // 10 k-tiles through 3 slots
  const auto inputs = random_inputs(g.out, scalars, 11);
  CHECK(lowered_error(g.out, schedule_hopper(g, t), inputs, scalars) < 2e-3);
  t.warpgroups = 2, t.stages = 2;
  CHECK(lowered_error(g.out, schedule_hopper(g, t), inputs, scalars) < 2e-3);
}

TEST_CASE(
    "persistent Hopper GEMM: blocks take output tiles in raster order, the ring's phases carry across "
    "tiles") {
  HopperTiling t;
  t.block_m = 128, t.block_n = 64, t.stages = 2, t.persistent_blocks = 3, t.raster_group = 2;
  for (const Type &type : {f16, bf16}) {
    Gemm g = make_gemm({.input = type, .output = f32});
    // 12 tiles over 3 blocks with 3 k-tiles each through 2 slots; 2 tiles for 3 blocks; one tile.
    for (const Shape shape : {Shape{300, 200, 136}, Shape{100, 72, 200}, Shape{8, 8, 8}}) {
      const auto scalars = gemm_sizes(g, shape.m, shape.n, shape.k);
      INFO(type_name(type), " ", shape.m, "x", shape.n, "x", shape.k);
      CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 13), scalars) < 1e-5);
    }
  }
  {
    Gemm g = make_gemm({.input = f16, .output = f32, .batched = true, .prefix = "b"});
    auto scalars = gemm_sizes(g, 130, 72, 96);
    scalars[g.batch.name()] = 3;  // 2 x 2 tiles a batch, 12 over 3 blocks
    CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 14), scalars) < 1e-5);
  }
  {
    Gemm g = make_gemm({.input = f16, .output = f32, .epilogue = Epilogue::bias_gelu, .prefix = "e"});
    auto scalars = gemm_sizes(g, 200, 136, 200);
    scalars[g.alpha->name()] = 0.5;
    t.accumulation = Accumulation::hybrid(4);  // promoted after every k-tile of every output tile
    CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 15), scalars) < 2e-3);
  }
  Gemm g = make_gemm({.input = f16, .output = f16});
  t = HopperTiling{};
  t.block_n = 256, t.stages = 3, t.persistent_blocks = 132;
  const Kernel k = lower(g.out, schedule_hopper(g, t), Target::sm90a()).kernels[0];
  const std::string source = cuda::cuda_source(k);
  INFO(source);
  CHECK(source.find("for (int tile_step = 0;") != std::string::npos);
  CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
  t.warp_specialized = false;  // (schedule_hopper then leaves the grid one block per tile)
  Schedule every_thread = schedule_hopper(g, t);
  every_thread[g.C].persistent(132);
  const std::string e = twist::testing::error_of([&] { lower(g.out, every_thread, Target::sm90a()); });
  CHECK(twist::testing::contains(e, "persistent() is lowered for warp-specialized wgmma kernels"));
}

TEST_CASE("the warp-specialized Hopper GEMM's source: a producer with fewer registers, consumers with more") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling t;
  t.block_n = 256, t.stages = 3;
  REQUIRE(t.warp_specialized);
  const Kernel k = lower(g.out, schedule_hopper(g, t), Target::sm90a()).kernels[0];
  CHECK(k.threads == 384);
  const std::string source = cuda::cuda_source(k);
  INFO(source);
  for (const char *instruction :
       {"setmaxnreg.dec.sync.aligned.u32 40", "setmaxnreg.inc.sync.aligned.u32 232",
        "if ((static_cast<int>(threadIdx.x) == 256))", "bar.sync 1, 256",
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", "__launch_bounds__(384, 1)"})
    CHECK_MESSAGE(source.find(instruction) != std::string::npos, instruction);
  // The consumers release a slot once per warpgroup: the empty barriers count 2 arrivals.
  CHECK(source.find("twist_mbarrier_init(tma_empty_address + (tma_slot * 8), 2)") != std::string::npos);
  CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
}

TEST_CASE("warp specialization that cannot lower is refused with demand and budget") {
  using twist::testing::contains;
  using twist::testing::error_of;
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling t;
  Schedule s = schedule_hopper(g, t);
  s[g.C].warp_specialize({40, 256});
  std::string e = error_of([&] { lower(g.out, s, Target::sm90a()); });
  INFO(e);
  CHECK(contains(e,
                 "warp_specialize() asks for 70656 registers a block (128 producer threads at 40 and 256 "
                 "consumer threads at 256), but the block starts with 64512 (384 threads at 168)"));
  s[g.C].warp_specialize({40, 160});
  e = error_of([&] { lower(g.out, s, Target::sm90a()); });
  CHECK(contains(e, "a block of 384 threads at 1 block(s) per SM starts with 168 registers a thread"));
  t.block_m = 256, t.block_n = 256, t.warpgroups = 4, t.stages = 2;
  s = schedule_hopper(g, t);
  // 640 threads start with 96 registers each: the producer's 56 given back cover 14 more for each of the 512
  // consumer threads, not 16 (setmaxnreg.inc would wait forever), although the SM's file would hold them.
  s[g.C].warp_specialize({40, 112});
  e = error_of([&] { lower(g.out, s, Target::sm90a()); });
  CHECK(contains(e, "but the block starts with 61440 (640 threads at 96)"));
  CHECK(contains(e, "lower the consumers' registers to at most 104"));
  s[g.C].warp_specialize({40, 104});
  e = error_of([&] { lower(g.out, s, Target::sm90a()); });
  CHECK(contains(e,
                 "each consumer thread keeps 128 registers of accumulators, but warp_specialize() gives the "
                 "consumers 104"));
  e = error_of([&] { s[g.C].warp_specialize({20, 232}); });
  CHECK(contains(e, "gives the producer warpgroup 20 registers per thread, but setmaxnreg takes 24 to 256"));
  GemmTiling mma;
  Schedule sync = schedule_tensor_core(g, mma);
  sync[g.C].warp_specialize();
  e = error_of([&] { lower(g.out, sync, Target::sm90a()); });
  CHECK(contains(e, "warp_specialize() splits a TMA + wgmma main loop"));
}

TEST_CASE("Hopper GEMM with 128-row warpgroups, N = 256 atoms and f16 accumulation") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling t;
  t.block_m = 128, t.block_n = 128, t.warpgroups = 1, t.stages = 3;  // two atoms of 64 rows per warpgroup
  const auto scalars = gemm_sizes(g, 70, 264, 136);
  CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 3), scalars) < 2e-3);
  t.block_n = 256, t.warpgroups = 2;
  CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 3), scalars) < 2e-3);
  t.block_n = 128;
  t.accumulation = Accumulation::fp16();
  CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 3), scalars) < 2e-2);
}

TEST_CASE("the Hopper GEMM source holds wgmma, TMA and mbarrier waits, and compiles for sm_90a") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  const LoweredProgram p = lower(g.out, schedule_hopper(g, HopperTiling{}), Target::sm90a());
  const Kernel &k = p.kernels[0];
  REQUIRE(k.tensor_maps.size() == 3);  // A's, B's and the output's (its TMA store)
  CHECK(k.tensor_maps[0].swizzle == TensorMap::Swizzle::b128);
  CHECK(k.tensor_maps[0].box == std::vector<int>{128, 64});
  CHECK(k.tensor_maps[1].box == std::vector<int>{64, 64});
  const std::string source = cuda::cuda_source(k);
  INFO(source);
  for (const char *instruction :
       {"wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", "cp.async.bulk.tensor.2d",
        "mbarrier.try_wait.parity", "mbarrier.arrive.expect_tx", "wgmma.wait_group.sync.aligned 1"})
    CHECK_MESSAGE(source.find(instruction) != std::string::npos, instruction);
  for (const std::string &instruction : k.required_instructions)
    CHECK_MESSAGE(source.find(instruction) != std::string::npos, instruction);
  CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
}

TEST_CASE("Hopper schedules that cannot lower are refused with the reason") {
  using twist::testing::contains;
  using twist::testing::error_of;
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling t;
  t.block_n = 100;
  std::string e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  INFO(e);
  CHECK(contains(e, "wgmma.m64nNk16 has N from 8 to 256 in steps of 8"));
  t = HopperTiling{};
  t.block_n = 264;
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "has N from 8 to 256"));
  t = HopperTiling{};
  t.block_m = 512, t.warpgroups = 2;
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "TMA boxes have at most 256 elements per dimension"));
  t = HopperTiling{};
  t.block_n = 8;  // B's rows of 8 f16 elements: 16 bytes
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "no swizzle allows"));
  t = HopperTiling{};
  t.block_n = 256, t.block_m = 256;  // 256 accumulators per thread
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "at least 256 registers, but sm_90a allows 255"));
  e = error_of([&] { lower(g.out, schedule_hopper(g, HopperTiling{}), Target::sm80()); });
  CHECK(contains(e, "the wgmma atom runs on sm_90a, but the program is lowered for sm_80"));
  {
    GemmTiling mma;
    mma.transport = Transport::tma;
    e = error_of([&] { lower(g.out, schedule_tensor_core(g, mma), Target::sm90a()); });
    CHECK(contains(e, "TMA stages are lowered only as the operands of a wgmma atom"));
  }
  t = HopperTiling{};
  t.block_n = 256, t.stages = 8;
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "bytes of shared memory per block"));
}

TEST_CASE("Hopper GEMM with hybrid accumulation: f16 wgmma partials promoted into f32 between k-tiles") {
  Gemm g = make_gemm({.input = f16, .output = f32});
  HopperTiling t;
  t.block_m = 128, t.block_n = 64, t.stages = 2;
  const auto scalars = gemm_sizes(g, 100, 72, 520);
  const auto inputs = random_inputs(g.out, scalars, 9);
  t.accumulation = Accumulation::fp16();
  const double f16_error = lowered_error(g.out, schedule_hopper(g, t), inputs, scalars);
  t.accumulation = Accumulation::hybrid(4);  // one 64-deep k-tile of f16 partials
  const double hybrid_error = lowered_error(g.out, schedule_hopper(g, t), inputs, scalars);
  t.accumulation = Accumulation::fp32();
  const double f32_error = lowered_error(g.out, schedule_hopper(g, t), inputs, scalars);
  INFO("f16 " << f16_error << ", hybrid " << hybrid_error << ", f32 " << f32_error);
  // Promoting every k-tile keeps the f16 error of 64-term sums, not of 520-term ones.
  CHECK(f32_error < 1e-5);
  CHECK(hybrid_error < f16_error / 2);
  CHECK(hybrid_error < 2e-3);
  t.accumulation = Accumulation::hybrid(8);
  const Kernel k = lower(g.out, schedule_hopper(g, t), Target::sm90a()).kernels[0];
  const std::string source = cuda::cuda_source(k);
  CHECK(source.find("wgmma.mma_async.sync.aligned.m64n64k16.f16.f16.f16") != std::string::npos);
  CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
  t.accumulation = Accumulation::hybrid(6);
  const std::string e =
      twist::testing::error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(twist::testing::contains(e, "promotes between k-tiles of 4 k-steps; choose a multiple of 4"));
}

TEST_CASE("Hopper GEMM with fused epilogues and batching matches the oracle") {
  HopperTiling t;
  t.block_m = 128, t.block_n = 64, t.stages = 2;
  {
    Gemm g = make_gemm({.input = bf16, .output = f32, .epilogue = Epilogue::bias_gelu, .prefix = "e"});
    auto scalars = gemm_sizes(g, 70, 88, 72);
    scalars[g.alpha->name()] = 0.5;
    CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 5), scalars) < 1e-5);
  }
  {
    Gemm g = make_gemm({.input = f16, .output = f32, .batched = true, .prefix = "b"});
    auto scalars = gemm_sizes(g, 70, 64, 96);
    scalars[g.batch.name()] = 2;
    CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 6), scalars) < 1e-5);
  }
}

TEST_CASE(
    "Hopper GEMM's epilogue through a TMA store matches the oracle: stmatrix or element writes, reused "
    "tiles") {
  for (const bool stmatrix : {true, false})
    for (const Type &type : {f16, bf16}) {
      Gemm g = make_gemm({.input = type, .output = type});
      HopperTiling t;
      t.block_m = 128, t.block_n = 64, t.stages = 2, t.persistent_blocks = 3, t.raster_group = 2;
      t.stmatrix = stmatrix;
      // 12 tiles over 3 blocks (each block's staging tile written again after its TMA store read it); a
      // tile mostly past the edge (the store clips it); one tile of 8 x 8.
      for (const Shape shape : {Shape{300, 200, 136}, Shape{100, 72, 200}, Shape{8, 8, 8}}) {
        const auto scalars = gemm_sizes(g, shape.m, shape.n, shape.k);
        INFO(type_name(type), " ", shape.m, "x", shape.n, "x", shape.k, stmatrix ? " stmatrix" : "");
        CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 21), scalars) <
              (type == f16 ? 1e-3 : 8e-3));
      }
    }
  {
    // A bias read in the epilogue (computed only inside the output) and a batch dimension (3-D boxes).
    Gemm g = make_gemm({.input = f16, .output = f16, .epilogue = Epilogue::bias_relu, .prefix = "e"});
    HopperTiling t;
    t.block_m = 128, t.block_n = 64, t.stages = 2;
    auto scalars = gemm_sizes(g, 70, 88, 72);
    scalars[g.alpha->name()] = 0.5;
    CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 22), scalars) < 1e-3);
    Gemm b = make_gemm({.input = bf16, .output = bf16, .batched = true, .prefix = "b"});
    scalars = gemm_sizes(b, 70, 64, 96);
    scalars[b.batch.name()] = 2;
    CHECK(lowered_error(b.out, schedule_hopper(b, t), random_inputs(b.out, scalars, 23), scalars) < 8e-3);
  }
  {
    // The mma.sync kernel takes the same store: one mechanism for every write-back tile.
    Gemm g = make_gemm({.input = f16, .output = f16, .prefix = "m"});
    Schedule s = schedule_tensor_core(g, GemmTiling{});
    s[g.C].store_output(Transport::tma);
    const auto scalars = gemm_sizes(g, 130, 72, 96);
    CHECK(lowered_error(g.out, s, random_inputs(g.out, scalars, 24), scalars) < 1e-3);
  }
}

TEST_CASE("the TMA-store epilogue's source: stmatrix, the async-proxy fence, bulk stores and their waits") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling with_stmatrix;
  with_stmatrix.stmatrix = true;
  const LoweredProgram p = lower(g.out, schedule_hopper(g, with_stmatrix), Target::sm90a());
  const Kernel &k = p.kernels[0];
  INFO(k.schedule_summary);
  REQUIRE(k.tensor_maps.size() == 3);
  CHECK(k.tensor_maps[2].buffer == g.out.name());
  CHECK(k.tensor_maps[2].box == std::vector<int>{128, 64});
  CHECK(k.tensor_maps[2].swizzle == TensorMap::Swizzle::b128);
  const std::string source = cuda::cuda_source(k);
  INFO(source);
  // In order: the previous tile's store has read the staging tile, the tile is written by stmatrix, made
  // visible to the async proxy, the consumers meet, one thread stores and commits; the last wait at the end.
  // (The instructions' helpers come first: stmatrix.sync.aligned.m8n8.x4 in twist_stmatrix<4, false>,
  // cp.async.bulk.tensor.2d.global.shared::cta in twist_tma_store_2d.)
  for (const char *helper :
       {"stmatrix.sync.aligned.m8n8.x4.shared.b16", "cp.async.bulk.tensor.2d.global.shared::cta"})
    CHECK_MESSAGE(source.find(helper) != std::string::npos, helper);
  size_t at = source.find("__global__");
  for (const char *step :
       {"cp.async.bulk.wait_group.read 0", "bar.sync 1, 256", "twist_stmatrix<4, false>(out_smem_address",
        "fence.proxy.async.shared::cta", "bar.sync 1, 256", "twist_tma_store_2d(out_smem_address",
        "cp.async.bulk.commit_group", "cp.async.bulk.wait_group.read 0"}) {
    const size_t found = source.find(step, at);
    CHECK_MESSAGE(found != std::string::npos, step);
    if (found != std::string::npos) at = found + 1;
  }
  CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
  // Without stmatrix the consumers write elements; with f32 outputs stmatrix does not apply.
  HopperTiling elements;
  elements.stmatrix = false;
  std::string plain =
      cuda::cuda_source(lower(g.out, schedule_hopper(g, elements), Target::sm90a()).kernels[0]);
  CHECK(plain.find("stmatrix") == std::string::npos);
  CHECK(plain.find("twist_tma_store_2d(out_smem_address") != std::string::npos);
  Gemm wide = make_gemm({.input = f16, .output = f32, .prefix = "w"});
  HopperTiling small;
  small.block_n = 64;
  const Kernel f32_kernel = lower(wide.out, schedule_hopper(wide, small), Target::sm90a()).kernels[0];
  const std::string f32_source = cuda::cuda_source(f32_kernel);
  CHECK(f32_source.find("stmatrix") == std::string::npos);
  CHECK(f32_source.find("twist_tma_store_2d(wout_smem_address") != std::string::npos);
  CHECK(!cuda::default_kernel_cache().compile(f32_source, f32_kernel.name + ".cu", {"sm_90a"}).cubin.empty());
  // A ring that leaves no room for the staging tile: stored directly, the demand and budget in the summary.
  HopperTiling deep;
  deep.stages = 4;
  const Kernel direct = lower(g.out, schedule_hopper(g, deep), Target::sm90a()).kernels[0];
  CHECK(twist::testing::contains(direct.schedule_summary,
                                 "outputs stored directly: the write-back tiles (65536 B) do not "
                                 "fit beside the TMA ring (196608 B)"));
  CHECK(direct.tensor_maps.size() == 2);
}

TEST_CASE(
    "Hopper GEMM's sub-tiled TMA-store epilogue matches the oracle: boxes through 2 buffers, reused across "
    "tiles") {
  // f16 and bf16 tiles of 2 or 3 boxes of 64 columns (3: the first box of a tile waits for every store, its
  // buffer having stored the previous tile's last box), f32 tiles of 2 boxes of 32 columns; 3 persistent
  // blocks, so every block's buffers are written again after their stores read them.
  for (const Type &type : {f16, bf16, f32})
    for (const int block_n : {64, 128, 192}) {
      if ((type == f32) != (block_n == 64)) continue;
      Gemm g = make_gemm({.input = type == f32 ? f16 : type, .output = type});
      HopperTiling t;
      t.block_m = 128, t.block_n = block_n, t.stages = 2, t.persistent_blocks = 3;
      t.output_sub_tile_buffers = 2;
      for (const Shape shape : {Shape{300, 408, 136}, Shape{100, 72, 200}, Shape{8, 8, 8}}) {
        const auto scalars = gemm_sizes(g, shape.m, shape.n, shape.k);
        INFO(type_name(type), " block_n ", block_n, " ", shape.m, "x", shape.n, "x", shape.k);
        CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 31), scalars) <
              (type == bf16 ? 8e-3 : 1e-3));
      }
    }
}

TEST_CASE("the sub-tiled TMA-store epilogue's source: per box a wait, the writes, a fence and one store") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling t;
  t.stages = 4;
  t.output_sub_tile_buffers = 2;
  const Kernel k = lower(g.out, schedule_hopper(g, t), Target::sm90a()).kernels[0];
  INFO(k.schedule_summary);
  REQUIRE(k.tensor_maps.size() == 3);
  CHECK(k.tensor_maps[2].box == std::vector<int>{128, 64});
  const std::string source = cuda::cuda_source(k);
  INFO(source);
  // 4 boxes of 128 x 64 through 2 buffers of 16 KB each: the block's shared memory is the 4 stages' 192 KB,
  // the buffers' 32 KB and the ring's mbarriers.
  CHECK(twist::testing::contains(k.schedule_summary,
                                 "4 TMA box(es) of 64 columns, 128B swizzle, 32768 B "
                                 "in 2 buffers of one box, stored by TMA box by box"));
  CHECK(k.shared_bytes >= 196608 + 32768);
  CHECK(k.shared_bytes < 196608 + 32768 + 1024);
  size_t at = source.find("__global__");
  for (int box = 0; box < 4; ++box)
    for (const char *step :
         {"cp.async.bulk.wait_group.read 1", "bar.sync 1, 256", "fence.proxy.async.shared::cta",
          "bar.sync 1, 256", "twist_tma_store_2d(out_smem_address", "cp.async.bulk.commit_group"}) {
      const size_t found = source.find(step, at);
      CHECK_MESSAGE(found != std::string::npos, "box ", box, ": ", step);
      if (found != std::string::npos) at = found + 1;
    }
  // Each box's writes are its own: no store of the tile is guarded by its box at run time.
  CHECK(source.find("/ 64) == ") == std::string::npos);
  CHECK(source.find("cp.async.bulk.wait_group.read 0", at) != std::string::npos);
  CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
}

TEST_CASE("sub-tiled TMA stores that cannot lower are refused with the reason") {
  using twist::testing::contains;
  using twist::testing::error_of;
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling t;
  t.stages = 5;
  t.output_sub_tile_buffers = 2;
  std::string e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  INFO(e);
  CHECK(contains(e,
                 "store_output_sub_tiles(2) asks for 32768 B of output buffers beside the TMA ring's "
                 "245760 B"));
  t.stages = 4;
  t.stmatrix = true;
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "store_output_sub_tiles(2) with stmatrix writes"));
  e = error_of([&] {
    Schedule s;
    s[g.C].store_output_sub_tiles(1);
  });
  CHECK(contains(e, "store_output_sub_tiles(1)"));
}

TEST_CASE("TMA stores that cannot lower are refused with the reason") {
  using twist::testing::contains;
  using twist::testing::error_of;
  Gemm g = make_gemm({.input = f16, .output = f16});
  Schedule s = schedule_tensor_core(g, GemmTiling{});
  s[g.C].store_output(Transport::tma);
  std::string e = error_of([&] { lower(g.out, s, Target::sm80()); });
  INFO(e);
  CHECK(contains(e, "store_output(Transport::tma) stores 'out' with TMA, which sm_80 does not have"));
  // Tiles TMA cannot box are refused as a TMA stage's are (plan_tma_boxes), with the store's way out.
  Schedule narrow =
      schedule_tensor_core(g, GemmTiling{.block_m = 64, .block_n = 8, .warp_m = 16, .warp_n = 8});
  narrow[g.C].store_output(Transport::tma);
  e = error_of([&] { lower(g.out, narrow, Target::sm90a()); });
  CHECK(contains(e,
                 "store_output(Transport::tma) of 'out' has rows of 8 elements (16 bytes), which no swizzle "
                 "allows"));
  CHECK(contains(e, "or use store_output(Transport::plain)"));
  e = error_of([&] { s[g.C].store_output(Transport::cp_async); });
  CHECK(contains(e, "cp.async copies into shared memory, not out of it"));
}
