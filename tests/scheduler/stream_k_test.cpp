// Stream-K on the persistent warp-specialized Hopper GEMM (FuncSchedule::stream_k, scheduler/stream_k.h):
// run on the interpreter in three block orders against the oracle at small odd shapes (uneven k ranges,
// tiles split into 1 to 3 parts, data-parallel waves before the split ones, fused epilogues, column pairs,
// batches, hybrid accumulation, TMA stores); the arrival counters left at zero for the next launch; the
// unit arithmetic checked by enumeration; the refusals; the source's fence, ticket and fold, compiled for
// sm_90a.
#include <doctest/doctest.h>

#include <algorithm>

#include "apps/gemm/gemm.h"
#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/cuda/runtime/kernel_cache.h"
#include "backends/reference/interpreter/interpreter.h"
#include "scheduler/arguments.h"
#include "scheduler/lower.h"
#include "tests/error_capture.h"
#include "tests/scheduler/gemm_support.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using namespace twist::apps;
using twist::testing::block_order_name;
using twist::testing::contains;
using twist::testing::error_of;
using twist::testing::gemm_sizes;
using twist::testing::in_block_order;
using twist::testing::kBlockOrders;
using twist::testing::lowered_error;
using twist::testing::random_inputs;
using BlockOrder = reference::InterpretOptions::BlockOrder;

namespace {

// 128 x 64 tiles of 64 k, 2 consumer warpgroups, a ring of 2, over `blocks` persistent blocks.
HopperTiling small_stream_k(int blocks) {
  HopperTiling t;
  t.block_m = 128, t.block_n = 64, t.stages = 2, t.persistent_blocks = blocks, t.raster_group = 2;
  t.stream_k = true;
  return t;
}

struct Case {
  int m, n, k, blocks;
  const char *what;
};

// Each case's GEMM (f16 and bf16 inputs, f32 output) under stream-K of `tiles` against the oracle, its blocks
// run in every order of kBlockOrders.
template <size_t N>
void check_in_every_block_order(const Case (&cases)[N], StreamKTiles tiles, uint64_t seed) {
  for (const Type &type : {f16, bf16}) {
    Gemm g = make_gemm({.input = type, .output = f32});
    for (const Case &c : cases) {
      const auto scalars = gemm_sizes(g, c.m, c.n, c.k);
      const auto inputs = random_inputs(g.out, scalars, seed);
      HopperTiling t = small_stream_k(c.blocks);
      t.stream_k_tiles = tiles;
      const Schedule s = schedule_hopper(g, t);
      for (BlockOrder order : kBlockOrders) {
        INFO(type_name(type), " ", c.m, "x", c.n, "x", c.k, ": ", std::string(c.what), ", blocks ",
             block_order_name(order));
        CHECK(lowered_error(g.out, s, inputs, scalars, in_block_order(order)) < 1e-5);
      }
    }
  }
}

// The parts of each stream-K tile, by enumerating every block's range as the kernel cuts it.
std::vector<int> parts_per_tile(int tiles, int k_tiles, int blocks) {
  const int dp_waves = std::max(tiles / blocks - 1, 0);
  const int sk_tiles = tiles - dp_waves * blocks, iterations = sk_tiles * k_tiles;
  const int sk_blocks = std::min(blocks, iterations);
  std::vector<std::vector<int>> owners(sk_tiles);
  for (int b = 0; b < sk_blocks; ++b)
    for (int i = b * iterations / sk_blocks; i < (b + 1) * iterations / sk_blocks; ++i)
      if (owners[i / k_tiles].empty() || owners[i / k_tiles].back() != b) owners[i / k_tiles].push_back(b);
  std::vector<int> parts;
  for (const auto &o : owners) parts.push_back(static_cast<int>(o.size()));
  return parts;
}

}  // namespace

TEST_CASE("stream-K's ranges: every k-tile once, at most two parts a tile past the first wave") {
  // What the kernel's closed forms (stream_k.cpp) must agree with: owners by enumeration.
  for (int blocks : {1, 3, 5, 132})
    for (int tiles : {1, 2, 7, 12, 133, 264, 798})
      for (int k_tiles : {1, 3, 4, 9, 64}) {
        const std::vector<int> parts = parts_per_tile(tiles, k_tiles, blocks);
        INFO(tiles, " tiles of ", k_tiles, " k-tiles on ", blocks, " blocks");
        for (int p : parts) CHECK(p >= 1);
        if (tiles >= blocks)
          for (int p : parts) CHECK(p <= 2);
      }
  CHECK(parts_per_tile(2, 4, 5) == std::vector<int>{3, 2});  // 8 k-tiles in ranges of 1, 2, 1, 2, 2
  // 5 whole tiles first, then 21 k-tiles in ranges of 4, 4, 4, 4, 5.
  CHECK(parts_per_tile(12, 3, 5) == std::vector<int>{1, 2, 2, 1, 1, 2, 1});
}

TEST_CASE("stream-K Hopper GEMM matches the oracle in any block order: 1 to 3 parts a tile, uneven ranges") {
  const Case cases[] = {
      {300, 200, 136, 5,
       "12 tiles of 3 k-tiles on 5 blocks: a wave of whole tiles, then 7 tiles in 21 k-tiles"},
      {100, 72, 200, 5, "2 tiles of 4 k-tiles on 5 blocks: ranges of 1 and 2, 3 parts a tile"},
      {130, 136, 520, 4, "6 tiles of 9 k-tiles on 4 blocks: ranges of 13 and 14 k-tiles across tiles"},
      {8, 8, 8, 3, "one tile of one k-tile: one block, one part"},
      {256, 128, 128, 2, "4 tiles on 2 blocks: whole waves, the ranges on the tiles' ends"},
  };
  check_in_every_block_order(cases, StreamKTiles::tail_and_wave, 61);
}

TEST_CASE("stream-K of the partial wave alone matches the oracle in any block order: many parts a tile") {
  // StreamKTiles::tail: whole waves of whole tiles, then the tail's k-tiles over every block.
  const Case cases[] = {
      {300, 200, 136, 5,
       "12 tiles of 3 k-tiles on 5 blocks: two whole waves, then 2 tiles in ranges of 1 and 2"},
      {384, 136, 584, 4, "9 tiles of 10 k-tiles on 4 blocks: two whole waves, then one tile in 4 parts"},
      {256, 128, 128, 2, "4 tiles on 2 blocks: whole waves only, nothing split"},
      {100, 72, 200, 5, "2 tiles on 5 blocks: no whole wave, every tile split"},
  };
  check_in_every_block_order(cases, StreamKTiles::tail, 67);
}

TEST_CASE("stream-K runs the epilogue once on the folded tile: fused epilogues, batches, pairs, TMA stores") {
  {
    Gemm g = make_gemm({.input = f16, .output = f16, .epilogue = Epilogue::bias_gelu, .prefix = "e"});
    auto scalars = gemm_sizes(g, 200, 136, 328);
    scalars[g.alpha->name()] = 0.5;
    const auto inputs = random_inputs(g.out, scalars, 62);
    HopperTiling t = small_stream_k(4);
    for (const bool hybrid : {false, true}) {
      // (hybrid: f16 partials promoted into f32 after every k-tile, the fold on the f32 sums)
      t.accumulation = hybrid ? Accumulation::hybrid(4) : Accumulation::fp32();
      for (BlockOrder order : {BlockOrder::reversed, BlockOrder::shuffled}) {
        INFO("bias + gelu, ", hybrid ? "hybrid, " : "", block_order_name(order));
        CHECK(lowered_error(g.out, schedule_hopper(g, t), inputs, scalars, in_block_order(order)) < 2e-3);
      }
    }
  }
  {
    Gemm g = make_gemm({.input = bf16, .output = bf16, .batched = true, .prefix = "b"});
    auto scalars = gemm_sizes(g, 130, 72, 200);
    scalars[g.batch.name()] = 3;  // 2 x 2 tiles a batch, 12 tiles of 4 k-tiles on 5 blocks
    const auto inputs = random_inputs(g.out, scalars, 63);
    for (BlockOrder order : kBlockOrders) {
      INFO("batched, ", block_order_name(order));
      CHECK(lowered_error(g.out, schedule_hopper(g, small_stream_k(5)), inputs, scalars,
                          in_block_order(order)) < 8e-3);
    }
  }
  {
    // A consumer of column pairs, with a bias input it reads: x silu(gate) * up + bias, the pairs folded in
    // registers before it reads them.
    const Gemm gemm = make_gemm({.input = f16, .output = f16, .prefix = "swiglu_"});
    const Input bias("swiglu_bias", f32, {Expr(40)});
    Func out("swiglu_out");
    Var i("i"), j("j");
    const Expr gate = gemm.C(i, 2 * j), up = gemm.C(i, 2 * j + 1);
    out(i, j) = cast(f16, gate / (1.0f + exp(-gate)) * up + bias(j));
    out.set_shape({gemm.M, Expr(40)});
    HopperTiling t = small_stream_k(3);
    t.block_m = 64, t.block_n = 32, t.warpgroups = 1;
    const Schedule s = schedule_hopper(gemm, t);
    const std::map<std::string, double> scalars = {
        {gemm.M.name(), 70}, {gemm.N.name(), 80}, {gemm.K.name(), 320}};
    const auto inputs = random_inputs(out, scalars, 64);
    for (BlockOrder order : kBlockOrders) {
      INFO("column pairs, ", block_order_name(order));
      CHECK(lowered_error(out, s, inputs, scalars, in_block_order(order)) < 2e-3);
    }
  }
}

TEST_CASE("stream-K leaves its counters at zero, so launches need no clearing between them") {
  Gemm g = make_gemm({.input = f16, .output = f32, .prefix = "rs"});
  const LoweredProgram p = lower(g.out, schedule_hopper(g, small_stream_k(5)), Target::sm90a());
  REQUIRE(p.kernels.size() == 1);
  CHECK(contains(p.kernels[0].schedule_summary, "stream-K"));
  CHECK(contains(p.kernels[0].schedule_summary, "stream_k of"));  // the associativity checker's approval
  const auto scalars = gemm_sizes(g, 100, 72, 200);
  std::map<std::string, reference::HostTensor> buffers = random_inputs(g.out, scalars, 65);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto &[name, tensor] : buffers) shapes[name] = tensor.shape();
  const Scalars bound = bind_arguments(p, shapes, scalars);
  std::string counters;
  for (const Workspace &w : p.workspaces) {
    reference::HostTensor tensor(w.type, evaluate_shape(w.shape, bound));
    tensor.fill(w.zeroed ? 0.0 : std::nan(""));
    if (w.zeroed) counters = w.name;
    buffers.emplace(w.name, std::move(tensor));
  }
  REQUIRE(p.workspaces.size() == 2);
  REQUIRE(!counters.empty());
  CHECK(buffers.at(counters).size() == 2 * 5);
  const BufferArg &out = p.outputs[0];
  buffers.emplace(out.name, reference::HostTensor(out.type, evaluate_shape(out.shape, bound)));
  reference::run_kernel(p.kernels[0], buffers, bound, in_block_order(BlockOrder::shuffled));
  const reference::HostTensor first = buffers.at(out.name);
  for (int64_t e = 0; e < buffers.at(counters).size(); ++e) CHECK(buffers.at(counters).get_linear(e) == 0);
  buffers.at(out.name).fill(std::nan(""));
  reference::run_kernel(p.kernels[0], buffers, bound, in_block_order(BlockOrder::reversed));
  CHECK(reference::relative_l2_error(buffers.at(out.name), first) == 0);
  for (int64_t e = 0; e < buffers.at(counters).size(); ++e) CHECK(buffers.at(counters).get_linear(e) == 0);
}

TEST_CASE("stream-K's source fences, takes tickets and folds, and compiles for sm_90a") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling t;
  t.stream_k = true;  // 128 x 256 x 64, 3 stages, persistent over 132 blocks, TMA stores
  const Kernel k = lower(g.out, schedule_hopper(g, t), Target::sm90a()).kernels[0];
  const std::string source = cuda::cuda_source(k);
  INFO(source);
  CHECK(contains(source, "__threadfence();"));
  CHECK(contains(source, "= atomicAdd(&"));
  CHECK(contains(source, "for (int sk_unit = 0;"));
  CHECK(contains(source, "for (int sk_left = 0;"));
  CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
}

TEST_CASE("stream-K schedules that cannot lower are refused with the reason") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling t;
  t.stream_k = true;
  t.persistent_blocks = 0;
  std::string e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "stream_k()"));
  CHECK(contains(e, "add persistent(blocks)"));
  t = HopperTiling{};
  t.stream_k = true, t.split_k = 2;
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "stream_k() and split_reduction(ko, 2)"));
  t = HopperTiling{};
  t.stream_k = true, t.cluster = 2;
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "stream_k() with cluster(2)"));
  t = HopperTiling{};
  t.stream_k = true, t.warp_specialized = false;  // (schedule_hopper then leaves the grid one block per tile)
  Schedule every_thread = schedule_hopper(g, t);
  e = error_of([&] { lower(g.out, every_thread, Target::sm90a()); });
  CHECK(contains(e, "add persistent(blocks) and warp_specialize()"));
  t = HopperTiling{};
  t.stream_k = true, t.ping_pong = true, t.warpgroups = 1;  // ping-pong's teams take whole tiles only
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "stream_k() with warp_specialize(WarpSpecialization::ping_pong)"));
}
