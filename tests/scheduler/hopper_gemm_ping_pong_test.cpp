// The Hopper GEMM in ping-pong (WarpSpecialization::ping_pong on a persistent contraction): two consumer
// warpgroups each computing whole tiles of their own, taking the block's tiles in turn on named barriers. Run
// on the interpreter (which runs each warpgroup as a group of its own, so the turns really wait for each
// other) at small odd shapes against the oracle, the barrier order checked in the CUDA source, compiled for
// sm_90a, and the schedules it cannot lower refused with the reason.
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
using twist::testing::contains;
using twist::testing::error_of;
using twist::testing::lowered_error;
using twist::testing::random_inputs;

namespace {

// 128 x 64 tiles of one warpgroup, two of them in ping-pong, 2 slots, over `blocks` persistent blocks.
HopperTiling small_ping_pong(int blocks) {
  HopperTiling t;
  t.block_m = 128, t.block_n = 64, t.warpgroups = 1, t.stages = 2;
  t.persistent_blocks = blocks, t.raster_group = 2;
  t.ping_pong = true;
  return t;
}

}  // namespace

TEST_CASE("ping-pong Hopper GEMM matches the oracle: f16 and bf16, even and odd tile counts per block") {
  for (const Type &type : {f16, bf16}) {
    Gemm g = make_gemm({.input = type, .output = f32});
    // 300 x 200: 12 tiles, over 3 blocks 4 each (2 a warpgroup), over 5 blocks 3 or 2 (the second
    // warpgroup one fewer, or as many); 100 x 72: 2 tiles for 3 blocks (the second warpgroup of each block
    // idle); 8 x 8 x 8: one tile with one k-tile. K = 200: a last k-tile mostly TMA's zero fill.
    for (const int blocks : {3, 5})
      for (const Shape shape : {Shape{300, 200, 136}, Shape{100, 72, 200}, Shape{8, 8, 8}}) {
        const auto scalars = gemm_sizes(g, shape.m, shape.n, shape.k);
        INFO(type_name(type), " ", shape.m, "x", shape.n, "x", shape.k, " over ", blocks, " blocks");
        CHECK(lowered_error(g.out, schedule_hopper(g, small_ping_pong(blocks)),
                            random_inputs(g.out, scalars, 31), scalars) < 1e-5);
      }
  }
}

TEST_CASE("ping-pong Hopper GEMM: each warpgroup's epilogue through its own TMA-store tile") {
  for (const bool stmatrix : {true, false})
    for (const Type &type : {f16, bf16}) {
      Gemm g = make_gemm({.input = type, .output = type});
      HopperTiling t = small_ping_pong(3);
      t.stmatrix = stmatrix;
      // 12 tiles: each warpgroup's staging tile written again after its own store read it.
      for (const Shape shape : {Shape{300, 200, 136}, Shape{100, 72, 200}}) {
        const auto scalars = gemm_sizes(g, shape.m, shape.n, shape.k);
        INFO(type_name(type), " ", shape.m, "x", shape.n, "x", shape.k, stmatrix ? " stmatrix" : "");
        CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 32), scalars) <
              (type == f16 ? 1e-3 : 8e-3));
      }
    }
  // Sub-tiled: each warpgroup's boxes through its own 2 buffers, waited for by its own storing thread (2 and
  // 3 boxes a tile).
  for (const int block_n : {128, 192}) {
    Gemm g = make_gemm({.input = f16, .output = f16, .prefix = "s"});
    HopperTiling t = small_ping_pong(3);
    t.block_n = block_n, t.output_sub_tile_buffers = 2;
    const auto scalars = gemm_sizes(g, 300, 408, 136);
    INFO("block_n ", block_n);
    CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 34), scalars) < 1e-3);
  }
  // Element stores without TMA: each warpgroup's 128 threads copy out their own tile.
  Gemm g = make_gemm({.input = f16, .output = f16, .prefix = "r"});
  HopperTiling rows = small_ping_pong(3);
  rows.tma_store = false;
  const auto scalars = gemm_sizes(g, 300, 200, 136);
  CHECK(lowered_error(g.out, schedule_hopper(g, rows), random_inputs(g.out, scalars, 33), scalars) < 1e-3);
}

TEST_CASE("ping-pong Hopper GEMM with a fused epilogue, batching, f16 and hybrid accumulation, split-K") {
  {
    Gemm g = make_gemm({.input = f16, .output = f16, .epilogue = Epilogue::bias_relu, .prefix = "e"});
    auto scalars = gemm_sizes(g, 170, 88, 72);
    scalars[g.alpha->name()] = 0.5;
    CHECK(lowered_error(g.out, schedule_hopper(g, small_ping_pong(3)), random_inputs(g.out, scalars, 34),
                        scalars) < 1e-3);
  }
  {
    Gemm g = make_gemm({.input = bf16, .output = bf16, .batched = true, .prefix = "b"});
    auto scalars = gemm_sizes(g, 130, 72, 96);
    scalars[g.batch.name()] = 3;  // 2 x 2 tiles a batch, 12 over 5 blocks
    CHECK(lowered_error(g.out, schedule_hopper(g, small_ping_pong(5)), random_inputs(g.out, scalars, 35),
                        scalars) < 8e-3);
  }
  {
    Gemm g = make_gemm({.input = f16, .output = f16, .prefix = "h"});
    const auto scalars = gemm_sizes(g, 150, 136, 584);  // 10 k-tiles a tile
    const auto inputs = random_inputs(g.out, scalars, 36);
    HopperTiling t = small_ping_pong(3);
    t.accumulation = Accumulation::fp16();
    CHECK(lowered_error(g.out, schedule_hopper(g, t), inputs, scalars) < 2e-2);
    t.accumulation = Accumulation::hybrid(8);
    CHECK(lowered_error(g.out, schedule_hopper(g, t), inputs, scalars) < 2e-3);
  }
  {
    // Split-K by a second kernel: the parts are tiles of the persistent grid like any other.
    Gemm g = make_gemm({.input = f16, .output = f32, .prefix = "s"});
    HopperTiling t = small_ping_pong(3);
    t.split_k = 3;
    const auto scalars = gemm_sizes(g, 130, 104, 456);  // 8 k-tiles in 3 parts, 2 x 2 x 3 tiles
    CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 37), scalars) < 1e-5);
  }
}

TEST_CASE("ping-pong Hopper GEMM in 2-block clusters: B multicast, the teams of both blocks in step") {
  // The blocks of a cluster take the two tiles of a pair at the same tile step, so the same team of each
  // computes them, and its releases arrive on both blocks' empty barriers (one a use from each block).
  HopperTiling t = small_ping_pong(4);
  t.block_n = 128, t.cluster = 2;  // B's tile in two boxes, one copied by each block
  for (const Type &type : {f16, bf16}) {
    Gemm g = make_gemm({.input = type, .output = type});
    // 300 x 520: 3 rows of tiles (rounded up to 4: the last pairs' second tiles wholly past the edge), 5
    // columns: 20 tiles over 4 blocks, 5 a block (3 for the first team, 2 for the second); 8 x 8 x 8: one
    // pair.
    for (const Shape shape : {Shape{300, 520, 136}, Shape{8, 8, 8}}) {
      const auto scalars = gemm_sizes(g, shape.m, shape.n, shape.k);
      INFO(type_name(type), " ", shape.m, "x", shape.n, "x", shape.k);
      CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 38), scalars) <
            (type == f16 ? 1e-3 : 8e-3));
    }
  }
  Gemm g = make_gemm({.input = f16, .output = f16, .prefix = "c"});
  HopperTiling big;
  big.block_m = 128, big.block_n = 128, big.warpgroups = 1, big.stages = 4, big.ping_pong = true,
  big.cluster = 2;
  const Kernel k = lower(g.out, schedule_hopper(g, big), Target::sm90a()).kernels[0];
  CHECK(k.cluster == std::array<int, 3>{2, 1, 1});
  const std::string source = cuda::cuda_source(k);
  CHECK(contains(source, "twist_mbarrier_init(tma_empty_address + (tma_slot * 8), 2)"));
  CHECK(contains(source, "multicast::cluster"));
  CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
}

TEST_CASE(
    "the ping-pong GEMM's source: turns around the main loop, an epilogue tile and barrier per warpgroup") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling t;
  t.block_m = 128, t.block_n = 128, t.warpgroups = 1, t.stages = 4, t.ping_pong = true;
  CHECK(t.consumer_registers() == 232);
  const Kernel k = lower(g.out, schedule_hopper(g, t), Target::sm90a()).kernels[0];
  INFO(k.schedule_summary);
  CHECK(k.threads == 384);
  // The summary counts the block as launched: the producer and both consumer warpgroups, where the loops
  // bind one warpgroup.
  CHECK(contains(k.schedule_summary, "  384 thread(s) per block in 12 warp(s); grid ("));
  CHECK(contains(k.schedule_summary, "ping-pong: 2 consumer warpgroups take the block's tiles in turn"));
  const std::string source = cuda::cuda_source(k);
  INFO(source);
  // One release a slot use: one warpgroup reads each k-tile.
  CHECK(contains(source, "twist_mbarrier_init(tma_empty_address + (tma_slot * 8), 1)"));
  // In order in the consumers: the second warpgroup gives the first its first turn; per tile, the turn is
  // taken, the k-tiles run, the turn passed, the wgmmas waited for, then the epilogue on the warpgroup's own
  // barrier and tile (slot consumer_team of the write-back) and its own TMA store; the last pass taken.
  size_t at = source.find("setmaxnreg.inc");
  REQUIRE(at != std::string::npos);
  for (const char *step : {"consumer_team = (static_cast<int>(threadIdx.x) >> 7)", "bar.arrive", "tile_turn",
                           "bar.sync", "twist_mbarrier_wait(tma_full", "twist_wgmma_m64n128k16", "bar.arrive",
                           "wgmma.wait_group.sync.aligned 0", "cp.async.bulk.wait_group.read 0", "bar.sync",
                           "fence.proxy.async.shared::cta", "bar.sync", "twist_tma_store_2d(out_smem_address",
                           "cp.async.bulk.commit_group", "bar.sync", "cp.async.bulk.wait_group.read 0"}) {
    const size_t found = source.find(step, at);
    CHECK_MESSAGE(found != std::string::npos, step);
    if (found != std::string::npos) at = found + 1;
  }
  CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
}

TEST_CASE("ping-pong schedules that cannot lower are refused with the reason") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling t = small_ping_pong(3);
  t.persistent_blocks = 0;
  std::string e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  INFO(e);
  CHECK(contains(e,
                 "deals a persistent block's output tiles to its 2 consumer warpgroups in turn, but the "
                 "grid is not persistent; add persistent()"));
  t = small_ping_pong(3);
  t.warpgroups = 2;
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "the loops must bind one warpgroup to a tile, but they bind 256 threads"));
  // Two warpgroups of 128 x 256 accumulators each (f32: 256 registers a thread) cannot fit.
  t = small_ping_pong(3);
  t.block_m = 128, t.block_n = 256;
  Schedule s = schedule_hopper(g, t);
  s[g.C].warp_specialize({40, 232, true});
  e = error_of([&] { lower(g.out, s, Target::sm90a()); });
  CHECK(contains(e, "registers"));
}
