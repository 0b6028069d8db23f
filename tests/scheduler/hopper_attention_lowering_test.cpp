// Attention's chained reduction on the Hopper datapath (AttentionTiling::atom = wgmma): Q by TMA once, K and
// V by TMA through a ring of mbarrier slots, S = Q K^T and P V as wgmma atoms, run on the interpreter at
// small odd shapes against the algorithm oracle, and compiled for sm_90a with the instructions it asks for.
#include <doctest/doctest.h>

#include <cmath>
#include <regex>

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
using twist::testing::lowered_error;
using twist::testing::random_inputs;

namespace {

// Two warpgroups of 64 rows, key tiles of 32 through a 2-slot ring: small enough for the interpreter, and
// every odd length below crosses tiles and the ring's wrap.
AttentionTiling small_hopper_tiling() {
  AttentionTiling t;
  t.atom = MatrixAtom::wgmma;
  t.block_rows = 128, t.warp_rows = 64, t.key_tile = 32, t.stages = 2;
  return t;
}

double hopper_error(const Attention &a, const AttentionTiling &t,
                    const std::map<std::string, double> &scalars, uint64_t seed) {
  return lowered_error(a.out, schedule_attention(a, t), random_inputs(a.out, scalars, seed), scalars);
}

// The problems every variant of the Hopper kernel (overlap_producer, warp specialization, ping-pong) is
// checked on first, with func names starting with `prefix`: f16 and bf16 at odd lengths; causal, where the
// first 30 queries of (70, 40) see no key and give 0, with skipped tiles and one tile only (20, 20);
// grouped-query heads sharing each K and V tile.
void check_variant_problems(const AttentionTiling &t, const std::string &prefix) {
  for (const Type &type : {f16, bf16}) {
    Attention a = make_attention({.dtype = type, .head_dim = 64, .prefix = prefix + type_name(type)});
    const double err = hopper_error(a, t, attention_sizes(a, 1, 2, 70, 77), 3);
    INFO(type_name(type), " error ", err);
    CHECK(err < (type == f16 ? 2e-3 : 1e-2));
  }
  Attention causal = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = prefix + "c"});
  for (auto [s, l] : {std::pair{70, 40}, std::pair{50, 77}, std::pair{130, 130}, std::pair{20, 20}}) {
    const double err = hopper_error(causal, t, attention_sizes(causal, 2, 1, s, l), 8);
    INFO(s, " queries, ", l, " keys: error ", err);
    CHECK(err < 2e-3);
  }
  Attention gqa =
      make_attention({.dtype = bf16, .head_dim = 64, .group = 2, .causal = true, .prefix = prefix + "g"});
  CHECK(hopper_error(gqa, t, attention_sizes(gqa, 2, 4, 61, 70), 12) < 1e-2);
}

// D = 128 on `one_step` (one key step a tile, three slots), D = 256 causal on `t`, both at lengths the tiles
// do not divide, and split-KV on `t`, each part running its own loop over its own ring.
void check_loop_problems(const AttentionTiling &t, const AttentionTiling &one_step, bool causal_d128,
                         const std::string &prefix) {
  Attention d128 =
      make_attention({.dtype = f16, .head_dim = 128, .causal = causal_d128, .prefix = prefix + "128"});
  CHECK(hopper_error(d128, one_step, attention_sizes(d128, 1, 1, 75, 45), 4) < 2e-3);
  Attention d256 = make_attention({.dtype = f16, .head_dim = 256, .causal = true, .prefix = prefix + "256"});
  CHECK(hopper_error(d256, t, attention_sizes(d256, 1, 1, 45, 70), 5) < 2e-3);
  Attention split = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = prefix + "s"});
  AttentionTiling parts = t;
  parts.split_kv = 3;
  CHECK(hopper_error(split, parts, attention_sizes(split, 1, 2, 33, 250), 9) < 2e-3);
}

// The shapes a reordered key loop (overlap_producer, delay_column_products) gets wrong first: one warpgroup
// of two row atoms with one key step per tile, D 256, split-KV.
void check_reordered_loop_problems(const AttentionTiling &t, const std::string &prefix) {
  AttentionTiling two_atoms = t;
  two_atoms.warp_rows = 128, two_atoms.key_tile = 16, two_atoms.stages = 3;
  check_loop_problems(t, two_atoms, false, prefix);
}

// What the delayed column products get wrong first: three slots (each released a tile after its S), causal
// with more keys than queries; grouped-query heads, causal, on 128-key tiles (the GPU test's D 64 case).
void check_delayed_products_problems(const AttentionTiling &t, const std::string &prefix) {
  AttentionTiling three = t;
  three.stages = 3;
  Attention c3 = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = prefix + "3"});
  CHECK(hopper_error(c3, three, attention_sizes(c3, 2, 1, 70, 77), 10) < 2e-3);
  AttentionTiling wide = t;
  wide.key_tile = 128;
  Attention gqa =
      make_attention({.dtype = f16, .head_dim = 64, .group = 2, .causal = true, .prefix = prefix + "g"});
  CHECK(hopper_error(gqa, wide, attention_sizes(gqa, 2, 4, 130, 170), 13) < 2e-3);
}

}  // namespace

TEST_CASE("Hopper attention (TMA ring, wgmma) matches the oracle: f16 and bf16, odd lengths") {
  for (const Type &type : {f16, bf16}) {
    Attention a = make_attention({.dtype = type, .head_dim = 64, .prefix = "h" + type_name(type)});
    const auto scalars = attention_sizes(a, 1, 2, 70, 77);
    const double err = hopper_error(a, small_hopper_tiling(), scalars, 3);
    INFO(type_name(type), " error ", err);
    CHECK(err < (type == f16 ? 2e-3 : 1e-2));
  }
}

TEST_CASE("Hopper causal attention: masked rows give 0, skipped tiles, key lengths the tiles do not divide") {
  // More queries than keys: aligned at the bottom right, the first 30 queries see no key and finalize to 0.
  Attention a = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = "hc"});
  for (auto [s, l] : {std::pair{70, 40}, std::pair{50, 77}, std::pair{130, 130}}) {
    const double err = hopper_error(a, small_hopper_tiling(), attention_sizes(a, 2, 1, s, l), 8);
    INFO(s, " queries, ", l, " keys: error ", err);
    CHECK(err < 2e-3);
  }
}

TEST_CASE("Hopper attention: grouped-query heads share a block's K and V tiles") {
  // The block's two warpgroups take two query heads of a group over the same 64 queries: Q's box spans two
  // heads, and each K and V tile is loaded once for both.
  for (int group : {2, 4}) {
    Attention gqa = make_attention({.dtype = bf16,
                                    .head_dim = 64,
                                    .group = group,
                                    .causal = true,
                                    .prefix = fmt::format("hg{}", group)});
    const LoweredProgram p = lower(gqa.out, schedule_attention(gqa, small_hopper_tiling()), Target::sm90a());
    const Kernel &k = p.kernels[0];
    REQUIRE(k.tensor_maps.size() == 3);
    for (const TensorMap &m : k.tensor_maps) CHECK(m.box[1] == (m.buffer == gqa.Q.name() ? 2 : 1));
    const double err = hopper_error(gqa, small_hopper_tiling(), attention_sizes(gqa, 2, 8, 61, 70), 12);
    INFO("group ", group, ": error ", err);
    CHECK(err < 1e-2);
  }
}

TEST_CASE("Hopper attention: one warpgroup of two row atoms, head dimension 128, one key step per tile") {
  // One warpgroup with two atoms of 64 rows, key tiles of 16 (a single key step).
  AttentionTiling t = small_hopper_tiling();
  t.warp_rows = 128, t.key_tile = 16, t.stages = 3;
  Attention d128 = make_attention({.dtype = f16, .head_dim = 128, .prefix = "h128"});
  const LoweredProgram p = lower(d128.out, schedule_attention(d128, t), Target::sm90a());
  CHECK(p.kernels[0].threads == 128);
  CHECK(hopper_error(d128, t, attention_sizes(d128, 1, 1, 75, 45), 4) < 2e-3);
}

TEST_CASE("Hopper split-KV attention: each part's key tiles through its own ring, combined by the monoid") {
  Attention a = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = "hsk"});
  AttentionTiling t = small_hopper_tiling();
  t.split_kv = 3;
  const auto scalars = attention_sizes(a, 1, 2, 33, 250);
  const LoweredProgram p = lower(a.out, schedule_attention(a, t), Target::sm90a());
  REQUIRE(p.kernels.size() == 2);
  CHECK(p.kernels[1].schedule_summary.find("folds 3 partial states") != std::string::npos);
  CHECK(hopper_error(a, t, scalars, 9) < 2e-3);
}

TEST_CASE("soft-capping, ALiBi and a sliding window take the Hopper path with no backend work") {
  struct Variant {
    const char *name;
    AttentionOptions options;
  };
  for (const Variant &v :
       {Variant{"softcap", {.head_dim = 64, .softcap = 20.0f, .prefix = "hcap"}},
        Variant{"alibi", {.head_dim = 64, .causal = true, .alibi = true, .prefix = "halibi"}},
        Variant{"window", {.head_dim = 64, .causal = true, .window = 24, .prefix = "hwin"}}}) {
    Attention a = make_attention(v.options);
    const double err = hopper_error(a, small_hopper_tiling(), attention_sizes(a, 1, 2, 61, 93), 12);
    INFO(v.name, " error ", err);
    CHECK(err < 2e-3);
  }
}

TEST_CASE(
    "the Hopper tiling rule: two warpgroups, 128-key tiles at D 128, 64 keys otherwise, one warpgroup for "
    "few blocks") {
  const AttentionTiling d128 =
      hopper_attention_tiling({.head_dim = 128, .batch_heads = 64, .queries = 4096, .keys = 4096});
  CHECK(d128.atom == MatrixAtom::wgmma);
  CHECK(d128.block_rows == 128);
  CHECK(d128.warp_rows == 64);
  CHECK(d128.min_blocks_per_sm == 1);
  // Warp specialization where runs measured it ahead: D 128 without a causal mask with the next tile's S
  // overlapped (112-key tiles, 3 slots), D 64 alone; not D 128 causal (128-key tiles, 2 slots), not D 256.
  CHECK(d128.warp_specialized);
  CHECK(!d128.ping_pong);
  CHECK(d128.overlap_scores);
  CHECK(d128.key_tile == 112);
  CHECK(d128.stages == 3);
  const AttentionTiling d128_causal = hopper_attention_tiling(
      {.head_dim = 128, .causal = true, .batch_heads = 64, .queries = 4096, .keys = 4096});
  CHECK(d128_causal.key_tile == 128);
  CHECK(d128_causal.stages == 2);
  CHECK(!d128_causal.warp_specialized);
  CHECK(!d128_causal.ping_pong);
  CHECK(!d128_causal.overlap_scores);
  // The overlapped S where a block visits 27 x 128 keys or more on average: a causal mask over 16384 keys
  // (about 8192 a block), not 2048 keys without one.
  const AttentionTiling long_causal = hopper_attention_tiling(
      {.head_dim = 128, .causal = true, .batch_heads = 16, .queries = 16384, .keys = 16384});
  CHECK(long_causal.warp_specialized);
  CHECK(long_causal.overlap_scores);
  CHECK(long_causal.key_tile == 112);
  CHECK(long_causal.longest_first);
  const AttentionTiling short_keys =
      hopper_attention_tiling({.head_dim = 128, .batch_heads = 128, .queries = 2048, .keys = 2048});
  CHECK(!short_keys.warp_specialized);
  CHECK(short_keys.key_tile == 128);
  CHECK(!hopper_attention_tiling({.head_dim = 256, .batch_heads = 64, .queries = 4096, .keys = 4096})
             .warp_specialized);
  CHECK(
      hopper_attention_tiling({.head_dim = 256, .batch_heads = 64, .queries = 4096, .keys = 4096}).key_tile ==
      64);
  const AttentionTiling d64 =
      hopper_attention_tiling({.head_dim = 64, .batch_heads = 64, .queries = 4096, .keys = 4096});
  CHECK(d64.key_tile == 64);
  CHECK(d64.min_blocks_per_sm == 2);
  CHECK(d64.warp_specialized);
  CHECK(!d64.ping_pong);
  CHECK(d64.consumer_registers() == 104);
  // 2 x 8 heads of 512 queries: 64 blocks of 128 rows would leave half the SMs idle.
  CHECK(
      hopper_attention_tiling({.head_dim = 64, .batch_heads = 16, .queries = 512, .keys = 512}).block_rows ==
      64);
  CHECK(hopper_attention_tiling({.head_dim = 64, .batch_heads = 16, .queries = 40, .keys = 40}).key_tile ==
        48);
}

TEST_CASE("the Hopper tiling rule orders causal blocks longest first, in groups of rows sharing L2") {
  const AttentionTiling plain =
      hopper_attention_tiling({.head_dim = 128, .batch_heads = 64, .queries = 4096, .keys = 4096});
  CHECK(!plain.longest_first);
  // 32 query tiles a row: two waves of 132 blocks want 9 rows, and 8 is the most whose K and V (2 MB a row)
  // fit 25 MB.
  const AttentionTiling causal = hopper_attention_tiling(
      {.head_dim = 128, .causal = true, .batch_heads = 64, .queries = 4096, .keys = 4096});
  CHECK(causal.longest_first);
  CHECK(causal.head_group == 8);
  CHECK(causal.name() == "flash_128x128_s2_w64_wgmma_lf8");
  // 128 query tiles a row: 3 rows for two waves; the divisors of 16 are 2 and 4, and 4 rows of 8 MB exceed
  // the budget.
  CHECK(hopper_attention_tiling(
            {.head_dim = 128, .causal = true, .batch_heads = 16, .queries = 16384, .keys = 16384})
            .head_group == 2);
  // Grouped-query heads packed two to a block: 32 rows of blocks, 2 MB of K and V each; 16 divides them.
  CHECK(hopper_attention_tiling(
            {.head_dim = 128, .causal = true, .batch_heads = 64, .queries = 4096, .keys = 4096, .group = 2})
            .head_group == 8);
  // 16 query tiles of D 64 at two blocks per SM: 33 rows wanted, 48 the first divisor of 96 above, and
  // its 24 MB of K and V fit.
  CHECK(hopper_attention_tiling(
            {.head_dim = 64, .causal = true, .batch_heads = 96, .queries = 2048, .keys = 2048})
            .head_group == 48);
}

TEST_CASE("longest first: blocks take the query tiles last first in groups of rows, and match the oracle") {
  AttentionTiling t = small_hopper_tiling();
  t.longest_first = true;
  // 10 rows of blocks in groups of 3 (the last group holds one row), 2 query tiles a row, causal with
  // skipped tiles and rows that see no key; grouped-query heads packed two to a block; split-KV parts.
  for (int group : {1, 3}) {
    t.head_group = group;
    Attention a =
        make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = fmt::format("hlf{}", group)});
    const LoweredProgram p = lower(a.out, schedule_attention(a, t), Target::sm90a());
    CHECK(p.kernels[0].schedule_summary.find("blocks take io last first") != std::string::npos);
    const double err = hopper_error(a, t, attention_sizes(a, 2, 5, 150, 120), 21);
    INFO("head group ", group, ": error ", err);
    CHECK(err < 2e-3);
  }
  Attention gqa =
      make_attention({.dtype = bf16, .head_dim = 64, .group = 2, .causal = true, .prefix = "hlfg"});
  CHECK(hopper_error(gqa, t, attention_sizes(gqa, 2, 6, 130, 140), 22) < 1e-2);
  AttentionTiling parts = t;
  parts.split_kv = 2;
  Attention split = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = "hlfs"});
  CHECK(hopper_error(split, parts, attention_sizes(split, 1, 2, 140, 200), 23) < 2e-3);
}

TEST_CASE("reverse() orders block loops only, and says which loops it may take") {
  using twist::testing::contains;
  using twist::testing::error_of;
  Attention a = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = "hrv"});
  Schedule s = schedule_attention(a, small_hopper_tiling());
  s[a.O].reverse("jo");
  std::string e = error_of([&] { lower(a.out, s, Target::sm90a()); });
  CHECK(contains(e, "reverse('jo') orders the blocks of a loop bound to a block axis, and 'jo' is bound to"));
  s = schedule_attention(a, small_hopper_tiling());
  s[a.O].reverse("rows");
  e = error_of([&] { lower(a.out, s, Target::sm90a()); });
  CHECK(contains(e, "'rows' is not one of its loops"));
}

TEST_CASE("warp-specialized attention tilings give the consumers what the block's producer leaves") {
  // A block starts with its share of the SM (168 registers a thread for 384 threads, 80 at two blocks per SM,
  // 248 for 256 threads); setmaxnreg moves only the block's own registers to the consumers.
  AttentionTiling t;
  t.atom = MatrixAtom::wgmma, t.block_rows = 128, t.warp_rows = 64, t.warp_specialized = true;
  CHECK(t.consumer_registers() == 240);
  t.min_blocks_per_sm = 2;
  CHECK(t.consumer_registers() == 104);
  t.min_blocks_per_sm = 1, t.block_rows = 64;
  CHECK(t.consumer_registers() == 248);
  CHECK(t.name() == "flash_64x64_s2_w64_wgmma_ws");
}

TEST_CASE("the Hopper attention source holds wgmma from shared and from registers, TMA and mbarrier waits") {
  for (const Type &type : {f16, bf16})
    for (int d : {64, 128, 256}) {
      Attention a = make_attention({.dtype = type, .head_dim = d, .causal = true});
      const AttentionTiling t = hopper_attention_tiling(
          {.head_dim = d, .causal = true, .batch_heads = 64, .queries = 4096, .keys = 4096});
      const LoweredProgram p = lower(a.out, schedule_attention(a, t), Target::sm90a());
      const Kernel &k = p.kernels[0];
      const std::string in = type == f16 ? "f16.f16" : "bf16.bf16";
      const std::string source = cuda::cuda_source(k);
      INFO(type_name(type), " D ", d);
      REQUIRE(k.tensor_maps.size() == 3);
      for (const std::string &instruction :
           {fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}", t.key_tile, in),
            fmt::format("wgmma.mma_async.sync.aligned.m64n{}k16.f32.{}", d, in),
            std::string("cp.async.bulk.tensor.4d"), std::string("mbarrier.try_wait.parity"),
            std::string("mbarrier.arrive.expect_tx")})
        CHECK_MESSAGE(source.find(instruction) != std::string::npos, instruction);
      // P V reads A from registers: the helper takes four 32-bit registers, not a descriptor.
      CHECK(source.find("_rs01(") != std::string::npos);
      for (const std::string &instruction : k.required_instructions)
        CHECK_MESSAGE(source.find(instruction) != std::string::npos, instruction);
      CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
    }
}

TEST_CASE("Hopper attention schedules that cannot lower are refused with the reason") {
  using twist::testing::contains;
  using twist::testing::error_of;
  Attention a = make_attention({.dtype = f16, .head_dim = 64, .prefix = "hr"});
  AttentionTiling t = small_hopper_tiling();
  std::string e = error_of([&] { lower(a.out, schedule_attention(a, t), Target::sm80()); });
  CHECK(contains(e, "the wgmma atom runs on sm_90a, but the program is lowered for sm_80"));
  t.warp_rows = 32;
  e = error_of([&] { schedule_attention(a, t); });
  CHECK(contains(e, "must be a multiple of 64 (the wgmma atom's rows)"));
  // D = 256 with 128-key tiles in three slots: Q, K and V do not fit the shared memory.
  Attention big = make_attention({.dtype = f16, .head_dim = 256, .prefix = "hb"});
  t = small_hopper_tiling();
  t.key_tile = 128, t.stages = 3;
  e = error_of([&] { lower(big.out, schedule_attention(big, t), Target::sm90a()); });
  CHECK(contains(e, "bytes of shared memory per block"));
}

TEST_CASE("overlap_producer: the next key tile's S in flight during this tile's update matches the oracle") {
  AttentionTiling t = small_hopper_tiling();
  t.overlap_scores = true;
  // Causal with one key tile only: no next tile to overlap.
  check_variant_problems(t, "ho");
  // The second S accumulator's later atom; odd and even tiles on the two sets of S at D 256; each split
  // part's first tile's S issued before its own loop.
  check_reordered_loop_problems(t, "ho");
}

TEST_CASE("overlap_producer's source issues the next S into its own accumulators and waits for one group") {
  for (int d : {64, 128, 256}) {
    Attention a = make_attention({.dtype = f16, .head_dim = d, .causal = true});
    AttentionTiling t = hopper_attention_tiling(
        {.head_dim = d, .causal = true, .batch_heads = 64, .queries = 4096, .keys = 4096});
    t.warp_specialized = false, t.overlap_scores = true;
    const Kernel k = lower(a.out, schedule_attention(a, t), Target::sm90a()).kernels[0];
    const std::string source = cuda::cuda_source(k);
    INFO("D ", d, "\n", source);
    CHECK(k.schedule_summary.find("the next key tile's S wgmmas overlap this tile's update") !=
          std::string::npos);
    // Odd tiles compute on acc_s_next and issue the next S into acc_s: no moves between the two sets.
    CHECK(source.find("_ss00(&acc_s_next[") != std::string::npos);
    CHECK(source.find("_ss00(&acc_s[") != std::string::npos);
    CHECK(!std::regex_search(source, std::regex(R"(acc_s\[[^\]]*\] = acc_s_next\[)")));
    CHECK(!std::regex_search(source, std::regex(R"(acc_s_next\[[^\]]*\] = acc_s\[)")));
    CHECK(source.find("wgmma.wait_group.sync.aligned 1;") != std::string::npos);
    // A wait after the key loop (after its last statement, the slot's release) for the first S, which the
    // loop retires whenever it runs: ptxas injects it otherwise (C7517).
    CHECK(source.rfind("wgmma.wait_group.sync.aligned 0;") > source.rfind("tma_empty_address"));
    // Both S accumulator arrays are pinned around the fences and waits.
    CHECK(source.find("\"+f\"(acc_s_next[r])") != std::string::npos);
    CHECK(source.find("\"+f\"(acc_s[r])") != std::string::npos);
    CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
  }
}

TEST_CASE(
    "delay_column_products: each tile's P V in flight during the next tile's update matches the oracle") {
  // The interpreter runs the wgmmas asynchronously: a read of acc.o or a write of P while the products that
  // use them are in flight, or a slot refilled before their V is read, is a reported hazard.
  AttentionTiling t = small_hopper_tiling();
  t.warp_specialized = true, t.delay_products = true;
  // Causal with one key tile only: the products issued after the loop alone.
  check_variant_problems(t, "hd");
  // Three slots; grouped-query heads on 128-key tiles.
  check_delayed_products_problems(t, "hd");
  // Two row atoms, D 256, and each split part's last products after its own loop.
  check_reordered_loop_problems(t, "hd");
}

TEST_CASE("delay_column_products' source issues P V after the next S and waits for the S alone") {
  Attention a = make_attention({.dtype = f16, .head_dim = 128});
  AttentionTiling t =
      hopper_attention_tiling({.head_dim = 128, .batch_heads = 64, .queries = 4096, .keys = 4096});
  t.overlap_scores = false, t.delay_products = true, t.key_tile = 128, t.stages = 3;
  const Kernel k = lower(a.out, schedule_attention(a, t), Target::sm90a()).kernels[0];
  const std::string source = cuda::cuda_source(k);
  INFO(source);
  CHECK(k.schedule_summary.find("each key tile's column products are issued after the next tile's S") !=
        std::string::npos);
  // One set of S accumulators; in the loop the S, then the previous tile's products, then a wait for all but
  // the products.
  CHECK(source.find("acc_s_next") == std::string::npos);
  const size_t loop = source.find("for (int jo = 0;", source.find("setmaxnreg.inc"));
  const size_t s_issue = source.find("_ss00(&acc_s[", loop), products = source.find("_rs01(&acc_o[", loop);
  REQUIRE(loop != std::string::npos);
  CHECK(s_issue < products);
  CHECK(source.find("wgmma.wait_group.sync.aligned 1;", products) < source.find("elem_s[", products));
  // The rescale of acc.o follows the products' wait, after the tile's update, and is pinned before the
  // fence of the next products: ptxas otherwise waits for the S in flight beside them (C7517).
  const size_t products_wait =
      source.find("wgmma.wait_group.sync.aligned 0;", source.find("elem_s[", products));
  CHECK(source.find("* rescale[", products_wait) < source.find("frag_p[", products_wait));
  CHECK(std::regex_search(
      source, std::regex(R"(\"\+f\"\(acc_o\[r\]\)::\"memory\"\);\n\s*asm volatile\(\"wgmma\.fence)")));
  // The last tile's products after the loop, before the rows' final sums.
  CHECK(source.rfind("_rs01(&acc_o[") > source.rfind("elem_s["));
  CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
}

TEST_CASE("delay_column_products is refused with overlap_producer, without a producer, on mma") {
  using twist::testing::contains;
  using twist::testing::error_of;
  Attention a = make_attention({.dtype = f16, .head_dim = 64, .prefix = "hdr"});
  AttentionTiling t = small_hopper_tiling();
  t.warp_specialized = true, t.delay_products = true, t.overlap_scores = true;
  // With ping-pong or without, the overlapped S is another order.
  for (bool ping_pong : {false, true}) {
    t.ping_pong = ping_pong;
    const std::string e = error_of([&] { lower(a.out, schedule_attention(a, t), Target::sm90a()); });
    CHECK(contains(e, "delay_column_products issues each tile's column products with the next tile's S"));
    CHECK(contains(e, "drop FuncSchedule::overlap_producer"));
  }
  t.ping_pong = false;
  std::string e;
  // Without a producer warpgroup (one GPU test case timed out on the H200).
  t.overlap_scores = false, t.warp_specialized = false;
  e = error_of([&] { lower(a.out, schedule_attention(a, t), Target::sm90a()); });
  CHECK(contains(e, "add warp_specialize() or drop FuncSchedule::delay_column_products"));
  AttentionTiling mma;
  mma.delay_products = true;
  e = error_of([&] { lower(a.out, schedule_attention(a, mma), Target::sm80()); });
  CHECK(contains(e, "use MatrixAtom::wgmma (sm_90a) or drop FuncSchedule::delay_column_products"));
}

TEST_CASE("overlap_producer is refused where the second S does not fit the registers, or on mma.sync") {
  using twist::testing::contains;
  using twist::testing::error_of;
  // D = 256 with 128-key tiles: two S tiles (64 values each), 128 column accumulators and P: 292 registers.
  Attention big = make_attention({.dtype = f16, .head_dim = 256, .prefix = "hob"});
  AttentionTiling t = small_hopper_tiling();
  t.key_tile = 128, t.overlap_scores = true;
  std::string e = error_of([&] { lower(big.out, schedule_attention(big, t), Target::sm90a()); });
  CHECK(contains(
      e, "overlap_producer keeps two tiles of S (64 values each) with the column accumulators (128)"));
  CHECK(contains(e,
                 "at least 292 registers per thread, but 256 threads per block and 1 block(s) per SM on "
                 "sm_90a allow 255"));
  Attention a = make_attention({.dtype = f16, .head_dim = 64, .prefix = "hom"});
  AttentionTiling mma;
  mma.overlap_scores = true;
  e = error_of([&] { lower(a.out, schedule_attention(a, mma), Target::sm80()); });
  CHECK(contains(e, "use MatrixAtom::wgmma (sm_90a) or drop FuncSchedule::overlap_producer"));
}

namespace {

AttentionTiling small_specialized_tiling() {
  AttentionTiling t = small_hopper_tiling();
  t.warp_specialized = true;
  return t;
}

}  // namespace

TEST_CASE(
    "warp-specialized Hopper attention: a producer warpgroup feeds the consumers, matching the oracle") {
  // The producer's thread loads Q and every K and V tile into slots the consumer warpgroups release; the
  // interpreter runs the roles as groups that switch at their mbarrier waits, so a wrong count or parity
  // hangs (a reported deadlock) and an early refill is a reported hazard, not only a wrong number.
  const AttentionTiling t = small_specialized_tiling();
  check_variant_problems(t, "hw");
  // D = 128 on one consumer warpgroup of two row atoms, one key step per tile, three slots.
  AttentionTiling one = t;
  one.warp_rows = 128, one.key_tile = 16, one.stages = 3;
  Attention d128 = make_attention({.dtype = f16, .head_dim = 128, .prefix = "hw128"});
  CHECK(hopper_error(d128, one, attention_sizes(d128, 1, 1, 75, 45), 4) < 2e-3);
  // D = 256, causal, lengths the tiles do not divide.
  Attention d256 = make_attention({.dtype = f16, .head_dim = 256, .causal = true, .prefix = "hw256"});
  CHECK(hopper_error(d256, t, attention_sizes(d256, 1, 1, 45, 70), 5) < 2e-3);
  // Split-KV: each part's producer fills its own ring.
  Attention split = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = "hws"});
  AttentionTiling parts = t;
  parts.split_kv = 3;
  CHECK(hopper_error(split, parts, attention_sizes(split, 1, 2, 33, 250), 9) < 2e-3);
  // With the next tile's S in flight during this tile's update, on the consumers' larger budget.
  Attention causal = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = "hwc"});
  AttentionTiling overlap = t;
  overlap.overlap_scores = true;
  for (auto [s, l] : {std::pair{70, 77}, std::pair{20, 20}})
    CHECK(hopper_error(causal, overlap, attention_sizes(causal, 2, 1, s, l), 10) < 2e-3);
}

TEST_CASE(
    "warp-specialized Hopper attention source: a producer branch, setmaxnreg, one release per warpgroup") {
  for (int d : {64, 128, 256}) {
    Attention a = make_attention({.dtype = f16, .head_dim = d, .causal = true});
    AttentionTiling t = hopper_attention_tiling(
        {.head_dim = d, .causal = true, .batch_heads = 64, .queries = 4096, .keys = 4096});
    t.warp_specialized = true;
    const Kernel k = lower(a.out, schedule_attention(a, t), Target::sm90a()).kernels[0];
    const std::string source = cuda::cuda_source(k);
    INFO("D ", d, "\n", k.schedule_summary);
    CHECK(k.threads == t.block_rows / t.warp_rows * 128 + 128);
    CHECK(k.schedule_summary.find("warp specialized") != std::string::npos);
    CHECK(source.find(fmt::format("setmaxnreg.dec.sync.aligned.u32 {};", t.producer_registers)) !=
          std::string::npos);
    CHECK(source.find(fmt::format("setmaxnreg.inc.sync.aligned.u32 {};", t.consumer_registers())) !=
          std::string::npos);
    for (const std::string &instruction : k.required_instructions)
      CHECK_MESSAGE(source.find(instruction) != std::string::npos, instruction);
    CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
  }
}

TEST_CASE("warp-specialized Hopper attention budgets are refused with the demand and the budget") {
  using twist::testing::contains;
  using twist::testing::error_of;
  Attention a = make_attention({.dtype = f16, .head_dim = 128, .prefix = "hwr"});
  // The rule's tiling without the overlapped S (whose own budget check is overlap_producer's refusal).
  AttentionTiling rule =
      hopper_attention_tiling({.head_dim = 128, .batch_heads = 64, .queries = 4096, .keys = 4096});
  rule.overlap_scores = false, rule.key_tile = 128, rule.stages = 2;
  // One consumer warpgroup of two row atoms keeps two 128-key tiles of S, the D = 128 column accumulators of
  // both and their P: more than setmaxnreg's 256.
  AttentionTiling one = rule;
  one.warp_rows = 128;
  Schedule s = schedule_attention(a, one);
  s[a.O].warp_specialize({24, 256});
  std::string e = error_of([&] { lower(a.out, s, Target::sm90a()); });
  INFO(e);
  CHECK(contains(e, "each consumer thread keeps at least 328 registers live across a key tile"));
  CHECK(contains(e, "gives the consumers 256"));
  s = schedule_attention(a, rule);
  // At two blocks per SM a block starts with 80 registers a thread: its producer's 56 given back cover
  // 28 more for each consumer thread, not 32 (setmaxnreg.inc would wait forever).
  s[a.O].warp_specialize({24, 112}).min_blocks_per_sm(2);
  e = error_of([&] { lower(a.out, s, Target::sm90a()); });
  INFO(e);
  CHECK(contains(e,
                 "asks for 31744 registers a block (128 producer threads at 24 and 256 consumer threads at "
                 "112), but the block starts with 30720 (384 threads at 80)"));
  CHECK(contains(e, "lower the consumers' registers to at most 104"));
  // One block at launch gives each of 384 threads 168: consumers below that cannot grow to their budget.
  s[a.O].warp_specialize({24, 160}).min_blocks_per_sm(1);
  e = error_of([&] { lower(a.out, s, Target::sm90a()); });
  INFO(e);
  CHECK(contains(e, "starts with 168 registers a thread"));
  CHECK(contains(e, "not 24 and 160"));
  // On mma.sync there is no TMA ring to hand to a producer.
  AttentionTiling mma;
  Schedule m = schedule_attention(a, mma);
  m[a.O].warp_specialize();
  e = error_of([&] { lower(a.out, m, Target::sm80()); });
  CHECK(contains(e, "warp_specialize() gives the TMA copies of a wgmma key loop to a producer warpgroup"));
}

namespace {

AttentionTiling small_ping_pong_tiling() {
  AttentionTiling t = small_specialized_tiling();
  t.ping_pong = true;
  return t;
}

// The shapes the warpgroups' turns get wrong first (ping-pong, with or without the delayed products): D = 128
// causal with one key step a tile, D 256, split-KV (each part's warpgroups taking turns over its own tiles).
void check_turn_problems(const AttentionTiling &t, const std::string &prefix) {
  AttentionTiling one_step = t;
  one_step.key_tile = 16, one_step.stages = 3;
  check_loop_problems(t, one_step, true, prefix);
}

}  // namespace

TEST_CASE("ping-pong Hopper attention: two consumer warpgroups taking turns match the oracle") {
  // The interpreter runs each consumer warpgroup as a group of its own that blocks at its bar.sync until
  // the other has arrived: a turn passed too early or not at all is a reported deadlock or an unbalanced
  // barrier at the block's end, not only a wrong number.
  const AttentionTiling t = small_ping_pong_tiling();
  // Grouped-query heads: the two warpgroups are two query heads of a group sharing each K and V tile.
  check_variant_problems(t, "hp");
  check_turn_problems(t, "hp");
  // With the next tile's S in flight during this tile's update: the turn passes after that S.
  Attention causal = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = "hpc"});
  AttentionTiling overlap = t;
  overlap.overlap_scores = true;
  for (auto [s, l] : {std::pair{70, 77}, std::pair{20, 20}, std::pair{130, 130}})
    CHECK(hopper_error(causal, overlap, attention_sizes(causal, 2, 1, s, l), 10) < 2e-3);
}

TEST_CASE("ping-pong Hopper attention source: bar.sync on the warpgroup's barrier, bar.arrive on the next") {
  for (int d : {64, 128, 256})
    for (bool overlap : {false, true}) {
      Attention a = make_attention({.dtype = f16, .head_dim = d, .causal = true});
      AttentionTiling t = hopper_attention_tiling(
          {.head_dim = d, .causal = true, .batch_heads = 64, .queries = 4096, .keys = 4096});
      t.warp_specialized = true, t.ping_pong = true;
      // The overlap's second S fits the consumers' registers at D = 128 only (104 at D = 64's two blocks).
      t.overlap_scores = overlap && d == 128;
      const Kernel k = lower(a.out, schedule_attention(a, t), Target::sm90a()).kernels[0];
      const std::string source = cuda::cuda_source(k);
      INFO("D ", d, " overlap ", t.overlap_scores, "\n", k.schedule_summary);
      CHECK(
          k.schedule_summary.find("ping-pong: consumer warpgroup w takes its turn on named barrier 2 + w") !=
          std::string::npos);
      // The ids are the warpgroup's (2 + w) and the next one's (2 + (w + 1) % 2), each barrier counting the
      // warpgroup that waits and the one that arrives.
      const std::string own = "bar.sync %0, 256;\\n\" :: \"r\"(((static_cast<int>(threadIdx.x) >> 7) + 2))";
      const std::string next =
          "bar.arrive %0, 256;\\n\" :: \"r\"(((((static_cast<int>(threadIdx.x) >> 7) + 1) & 1) + 2))";
      CHECK_MESSAGE(source.find(own) != std::string::npos, own);
      CHECK_MESSAGE(source.find(next) != std::string::npos, next);
      // Every warpgroup runs as many bar.sync as the others: the last one keeps its last turn, and no turn is
      // taken after the key loop's last pass.
      const size_t last_pass = source.rfind("bar.arrive");
      REQUIRE(last_pass != std::string::npos);
      CHECK(source.find("bar.sync %0", last_pass) == std::string::npos);
      CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
    }
}

TEST_CASE("ping-pong with delayed column products: FlashAttention-3's full order matches the oracle") {
  // A turn issues tile r's S and tile r - 1's products, and is passed before their waits; the interpreter's
  // named barriers count each id's arrivals and block a bar.sync until the other warpgroup has arrived, so a
  // turn taken or passed once too often is a reported deadlock or an unbalanced barrier, and a read of acc.o
  // or a write of P under products in flight a reported hazard.
  AttentionTiling t = small_ping_pong_tiling();
  t.delay_products = true;
  // Odd lengths, f16 and bf16; causal with rows that see no key (0), skipped tiles and one tile only (the
  // products after the loop alone); grouped-query heads.
  check_variant_problems(t, "hdp");
  // Three slots; grouped-query heads on 128-key tiles.
  check_delayed_products_problems(t, "hdp");
  // One key step a tile, D = 256 and split-KV (each part's last products after its own loop).
  check_turn_problems(t, "hdp");
}

TEST_CASE("ping-pong with delayed column products: the turn around S and P V, passed before the waits") {
  // D 128 on 128-key tiles, 2 and 3 slots, causal and not, and on 176-key tiles without a mask
  // (FlashAttention-3's): each compiles for sm_90a.
  struct Case {
    int key_tile, stages;
    bool causal;
  };
  for (const Case c : {Case{128, 2, false}, Case{128, 3, false}, Case{128, 2, true}, Case{128, 3, true},
                       Case{176, 2, false}}) {
    Attention a = make_attention({.dtype = f16, .head_dim = 128, .causal = c.causal});
    AttentionTiling t = hopper_attention_tiling(
        {.head_dim = 128, .causal = c.causal, .batch_heads = 64, .queries = 4096, .keys = 4096});
    t.warp_specialized = true, t.ping_pong = true, t.overlap_scores = false, t.delay_products = true;
    t.key_tile = c.key_tile, t.stages = c.stages;
    const Kernel k = lower(a.out, schedule_attention(a, t), Target::sm90a()).kernels[0];
    const std::string source = cuda::cuda_source(k);
    INFO(t.name(), "\n", k.schedule_summary);
    CHECK(twist::testing::contains(k.schedule_summary,
                                   "each key tile's column products are issued after the next tile's S"));
    CHECK(twist::testing::contains(k.schedule_summary,
                                   "to issue each tile's S and the previous tile's column products"));
    // In the loop: the tile's landing, the turn (bar.sync on the warpgroup's barrier), the S, the previous
    // tile's products, the pass (bar.arrive on the other's), then the wait for the S alone before the
    // softmax.
    const size_t loop = source.find("for (int jo = ", source.find("setmaxnreg.inc"));
    REQUIRE(loop != std::string::npos);
    const size_t landed = source.find("twist_mbarrier_wait(", loop),
                 turn = source.find("bar.sync %0, 256;", loop), s_issue = source.find("_ss00(&acc_s[", loop),
                 products = source.find("_rs01(&acc_o[", loop),
                 pass = source.find("bar.arrive %0, 256;", loop),
                 s_wait = source.find("wgmma.wait_group.sync.aligned 1;", loop),
                 softmax = source.find("elem_s[", loop);
    CHECK(landed < turn);
    CHECK(turn < s_issue);
    CHECK(s_issue < products);
    CHECK(products < pass);
    CHECK(pass < s_wait);
    CHECK(s_wait < softmax);
    // No turn after the loop: the last tile's products are issued after the key loop's last pass, and every
    // warpgroup runs one bar.sync a tile.
    const size_t last_pass = source.rfind("bar.arrive %0, 256;");
    CHECK(source.rfind("_rs01(&acc_o[") > last_pass);
    CHECK(source.find("bar.sync %0, 256;", last_pass) == std::string::npos);
    CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
  }
}

TEST_CASE("ping-pong is refused without two consumer warpgroups or without warp specialization") {
  using twist::testing::contains;
  using twist::testing::error_of;
  Attention a = make_attention({.dtype = f16, .head_dim = 64, .prefix = "hpr"});
  AttentionTiling one = small_ping_pong_tiling();
  one.block_rows = 64;
  std::string e = error_of([&] { lower(a.out, schedule_attention(a, one), Target::sm90a()); });
  INFO(e);
  CHECK(contains(e, "WarpSpecialization::ping_pong alternates two or more consumer warpgroups"));
  CHECK(contains(e, "but the block has 1 (128 threads bound to its loops)"));
  AttentionTiling plain = small_ping_pong_tiling();
  plain.warp_specialized = false;
  e = error_of([&] { schedule_attention(a, plain); });
  CHECK(contains(e, "ping-pong hands the consumer warpgroups turns between themselves"));
  // The consumers' register budget is checked as without ping-pong, with the demand and the budget: two
  // 192-key tiles of S in flight (the overlap), the D = 128 column accumulators and P.
  Attention d128 = make_attention({.dtype = f16, .head_dim = 128, .prefix = "hpr128"});
  AttentionTiling wide =
      hopper_attention_tiling({.head_dim = 128, .batch_heads = 64, .queries = 4096, .keys = 4096});
  wide.warp_specialized = true, wide.ping_pong = true, wide.overlap_scores = true, wide.key_tile = 192;
  e = error_of([&] { lower(d128.out, schedule_attention(d128, wide), Target::sm90a()); });
  INFO(e);
  CHECK(contains(e, "at least 308 registers per thread, but warp_specialize() gives the consumers 240"));
}

namespace {

// The relative error of tiling `t` on a persistent grid of `blocks`, the interpreter running the grid's
// blocks in `order`.
double persistent_error(const Attention &a, AttentionTiling t, int blocks,
                        const std::map<std::string, double> &scalars, uint64_t seed,
                        reference::InterpretOptions::BlockOrder order) {
  t.persistent_blocks = blocks;
  return lowered_error(a.out, schedule_attention(a, t), random_inputs(a.out, scalars, seed), scalars,
                       twist::testing::in_block_order(order));
}

}  // namespace

TEST_CASE(
    "persistent Hopper attention: each block's tiles in turn, Q and the ring carried on, match the oracle") {
  // Grids of 2 and 3 blocks over 5 to 18 tiles. The interpreter runs the producer and each consumer
  // warpgroup as groups that switch at their mbarrier waits: a Q released too early (the next tile's Q over
  // an S still reading it) is a reported hazard, a wrong phase of Q's barriers or of a slot carried from one
  // tile to the next a reported deadlock or a wrong number, and an unbalanced turn of ping-pong a barrier
  // left with arrivals at the block's end.
  using twist::testing::kBlockOrders;
  const AttentionTiling ws = small_specialized_tiling();
  AttentionTiling overlap = ws, delayed_pp = small_ping_pong_tiling(), pp = small_ping_pong_tiling();
  overlap.overlap_scores = true, overlap.stages = 3;
  delayed_pp.delay_products = true;
  Attention plain = make_attention({.dtype = f16, .head_dim = 64, .prefix = "hpe"});
  // 3 rows of blocks, 3 query tiles each: 9 tiles whose key counts differ (causal: 4, 8 and 9 key tiles of
  // 32, the later ones skipped; the first 20 queries see no key and give 0).
  Attention causal = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = "hpec"});
  // Two query heads of a group packed into a block: 6 rows of blocks, 3 query tiles each.
  Attention gqa =
      make_attention({.dtype = bf16, .head_dim = 64, .group = 2, .causal = true, .prefix = "hpeg"});
  for (const auto order : kBlockOrders) {
    INFO("blocks ", twist::testing::block_order_name(order));
    for (const AttentionTiling &t : {ws, overlap, pp, delayed_pp}) {
      INFO(t.name());
      CHECK(persistent_error(plain, t, 2, attention_sizes(plain, 1, 5, 70, 77), 3, order) < 2e-3);
      CHECK(persistent_error(causal, t, 3, attention_sizes(causal, 1, 3, 300, 280), 8, order) < 2e-3);
      CHECK(persistent_error(gqa, t, 3, attention_sizes(gqa, 2, 6, 130, 140), 12, order) < 1e-2);
    }
  }
  // D = 128 on one consumer warpgroup of two row atoms, one key step a tile, 3 slots; D = 256 causal.
  AttentionTiling one = ws;
  one.warp_rows = 128, one.key_tile = 16, one.stages = 3;
  Attention d128 = make_attention({.dtype = f16, .head_dim = 128, .causal = true, .prefix = "hpe128"});
  Attention d256 = make_attention({.dtype = f16, .head_dim = 256, .causal = true, .prefix = "hpe256"});
  for (const AttentionTiling &t : {one, overlap}) {
    INFO(t.name());
    CHECK(persistent_error(d128, t, 2, attention_sizes(d128, 1, 3, 140, 145), 4,
                           reference::InterpretOptions::BlockOrder::shuffled) < 2e-3);
  }
  for (const AttentionTiling &t : {ws, delayed_pp})
    CHECK(persistent_error(d256, t, 2, attention_sizes(d256, 1, 5, 45, 70), 5,
                           reference::InterpretOptions::BlockOrder::reversed) < 2e-3);
  // The rule's block order under a causal mask (longest first, groups of 3 rows of blocks), and split-KV
  // parts (a tile per part), each over more tiles than blocks.
  AttentionTiling longest = overlap;
  longest.longest_first = true, longest.head_group = 3;
  CHECK(persistent_error(causal, longest, 3, attention_sizes(causal, 2, 5, 150, 120), 21,
                         reference::InterpretOptions::BlockOrder::in_order) < 2e-3);
  AttentionTiling parts = delayed_pp;
  parts.split_kv = 2;
  CHECK(persistent_error(causal, parts, 3, attention_sizes(causal, 1, 3, 140, 200), 23,
                         reference::InterpretOptions::BlockOrder::shuffled) < 2e-3);
}

TEST_CASE(
    "persistent Hopper attention: the source loops over tiles; refused without a producer, with last-block "
    "folds") {
  using twist::testing::contains;
  using twist::testing::error_of;
  Attention a = make_attention({.dtype = f16, .head_dim = 128, .causal = true, .prefix = "hpes"});
  AttentionTiling t = hopper_attention_tiling(
      {.head_dim = 128, .causal = true, .batch_heads = 64, .queries = 4096, .keys = 4096});
  t.warp_specialized = true, t.overlap_scores = true, t.key_tile = 112, t.stages = 3;
  t.persistent_blocks = t.resident_blocks();
  CHECK(t.name().find("_pers") != std::string::npos);
  const Kernel k = lower(a.out, schedule_attention(a, t), Target::sm90a()).kernels[0];
  INFO(k.schedule_summary);
  CHECK(contains(k.schedule_summary, "persistent grid: min(132, tiles) blocks"));
  const std::string source = cuda::cuda_source(k);
  CHECK(contains(source, "tile_step"));
  CHECK(contains(source, "ring_base"));
  CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
  AttentionTiling plain = small_hopper_tiling();
  plain.persistent_blocks = 4;
  const std::string e = error_of([&] { lower(a.out, schedule_attention(a, plain), Target::sm90a()); });
  INFO(e);
  CHECK(contains(e, "persistent() has a producer warpgroup load the next output tile's Q"));
  // Split-KV parts folded by each tile's last block to finish need a block per part of a tile.
  AttentionTiling last_block = t;
  last_block.split_kv = 2, last_block.split_combine = SplitCombine::last_block;
  const std::string f = error_of([&] { lower(a.out, schedule_attention(a, last_block), Target::sm90a()); });
  INFO(f);
  CHECK(
      contains(f, "persistent() gives blocks several tiles; drop persistent() or use SplitCombine::kernel"));
}
