// Wide heads on the Hopper datapath (Gemma 4's full layers: D = 512): the output's columns split across
// consumer warpgroups (AttentionTiling::column_parts), each computing S for the block's rows and keeping
// its share of the P V accumulators; run on the interpreter against the oracle and compiled for sm_90a.
#include <doctest/doctest.h>

#include "apps/attention/attention.h"
#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/cuda/runtime/kernel_cache.h"
#include "scheduler/lower.h"
#include "tests/error_capture.h"
#include "tests/scheduler/attention_support.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using namespace twist::apps;
using twist::testing::attention_sizes;
using twist::testing::error_of;
using twist::testing::lowered_error;
using twist::testing::random_inputs;

namespace {

// One atom of 64 rows, its columns over `column_parts` warpgroups, key tiles of 32 through 2 slots.
AttentionTiling wide_tiling(int column_parts) {
  AttentionTiling t;
  t.atom = MatrixAtom::wgmma;
  t.block_rows = 64, t.warp_rows = 64, t.key_tile = 32, t.stages = 2;
  t.column_parts = column_parts;
  return t;
}

double wide_error(const Attention &a, const AttentionTiling &t, const std::map<std::string, double> &scalars,
                  uint64_t seed) {
  return lowered_error(a.out, schedule_attention(a, t), random_inputs(a.out, scalars, seed), scalars);
}

}  // namespace

TEST_CASE("wide heads: D 512 over two column warpgroups, causal with masked rows, odd lengths, GQA 8") {
  // The 31B model's full layers: 8 query heads per key/value head. 70 queries over 45 keys: the first 25
  // see no key and give 0; 45 keys cross a tile and the ring's wrap.
  Attention a =
      make_attention({.dtype = bf16, .head_dim = 512, .group = 8, .causal = true, .prefix = "w512"});
  const AttentionTiling t = wide_tiling(2);
  const LoweredProgram p = lower(a.out, schedule_attention(a, t), Target::sm90a());
  CHECK(p.kernels[0].threads == 256);
  for (auto [s, l] : {std::pair{70, 45}, std::pair{33, 77}}) {
    const double err = wide_error(a, t, attention_sizes(a, 1, 8, s, l), 5);
    INFO(s, " queries, ", l, " keys: error ", err);
    CHECK(err < 1e-2);
  }
}

TEST_CASE("wide heads: a sliding window and f16, columns over two and four warpgroups") {
  Attention win = make_attention(
      {.dtype = f16, .head_dim = 256, .group = 2, .causal = true, .window = 24, .prefix = "w256win"});
  CHECK(wide_error(win, wide_tiling(2), attention_sizes(win, 1, 2, 61, 93), 7) < 2e-3);
  Attention plain = make_attention({.dtype = f16, .head_dim = 128, .prefix = "w128"});
  CHECK(wide_error(plain, wide_tiling(4), attention_sizes(plain, 2, 1, 70, 45), 3) < 2e-3);
}

TEST_CASE("wide heads: D 512 on sm_90a: each warpgroup's P V a wgmma of N 256, within the shared memory") {
  for (const Type &type : {f16, bf16}) {
    Attention a = make_attention({.dtype = type, .head_dim = 512, .group = 8, .causal = true});
    const AttentionTiling t = hopper_attention_tiling(
        {.head_dim = 512, .causal = true, .batch_heads = 32, .queries = 8192, .keys = 8192});
    const LoweredProgram p = lower(a.out, schedule_attention(a, t), Target::sm90a());
    const Kernel &k = p.kernels[0];
    const std::string in = type == f16 ? "f16.f16" : "bf16.bf16";
    const std::string source = cuda::cuda_source(k);
    INFO(type_name(type), " ", t.name());
    CHECK(t.column_parts == 2);
    for (const std::string &instruction :
         {fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}", t.key_tile, in),
          fmt::format("wgmma.mma_async.sync.aligned.m64n256k16.f32.{}", in),
          std::string("cp.async.bulk.tensor.4d")})
      CHECK_MESSAGE(source.find(instruction) != std::string::npos, instruction);
    CHECK(k.shared_bytes <= Target::sm90a().max_shared_bytes_per_block);
    CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
  }
}

TEST_CASE("wide heads: D 512 in one warpgroup, or tiles past the shared memory, are refused saying why") {
  Attention a = make_attention({.dtype = f16, .head_dim = 512, .prefix = "w512bad"});
  CHECK(error_of([&] { schedule_attention(a, wide_tiling(1)); }).find("column_parts") != std::string::npos);
  AttentionTiling wide_keys = wide_tiling(2);
  wide_keys.key_tile = 64;
  const std::string shared =
      error_of([&] { lower(a.out, schedule_attention(a, wide_keys), Target::sm90a()); });
  CHECK(shared.find("shared memory") != std::string::npos);
}

TEST_CASE("wide heads when decoding: the rule splits D 512 across two warps, split-KV, GQA 8") {
  // Each warp computes S for the group's 8 rows over all of D (Q read from shared memory at every k-step) and
  // keeps its 256 columns of the output; K and V tiles are staged once for both.
  const DecodeProblemShape shape{.head_dim = 512, .group = 8, .batch_kv_heads = 2, .keys = 301};
  const AttentionTiling t = decode_tiling(shape);
  CHECK(t.column_parts == 2);
  // D 256 fits one warp: on 4 blocks per SM (enough pairs to fill the machine) it is not split; on 2 (few
  // pairs) it is, for a warp on each of the SM's schedulers.
  const AttentionTiling many =
      decode_tiling({.head_dim = 256, .group = 2, .batch_kv_heads = 1024, .keys = 4096});
  CHECK(many.min_blocks_per_sm == 4);
  CHECK(many.column_parts == 1);
  const AttentionTiling few =
      decode_tiling({.head_dim = 256, .group = 2, .batch_kv_heads = 16, .keys = 1024});
  CHECK(few.min_blocks_per_sm == 2);
  CHECK(few.column_parts == 2);
  Attention a =
      make_attention({.dtype = bf16, .head_dim = 512, .group = 8, .decode = true, .prefix = "wdec"});
  const LoweredProgram p = lower(a.out, schedule_decode(a, t), Target::sm90a());
  CHECK(p.kernels[0].threads == 64);
  CHECK(p.kernels[0].shared_bytes == decode_shared_bytes(shape, t));
  const auto scalars = attention_sizes(a, 2, 8, 1, 301);
  CHECK(lowered_error(a.out, schedule_decode(a, t), random_inputs(a.out, scalars, 21), scalars) < 1e-2);
}
