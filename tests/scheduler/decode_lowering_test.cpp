// Decoding by rule (apps::decode_tiling): the budgets the rule fills checked against the kernels lower()
// builds, and the rule's tilings run on the interpreter against the oracle; the split's combine with chains
// that do not divide the parts, on a monoid that does not commute.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "algebra/builtins.h"
#include "apps/attention/attention.h"
#include "scheduler/lower.h"
#include "tests/scheduler/attention_support.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using namespace twist::apps;
using twist::testing::affine_rows;
using twist::testing::AffineRows;
using twist::testing::attention_sizes;
using twist::testing::compile_for_both_targets;
using twist::testing::lowered_error;
using twist::testing::random_inputs;

namespace {

constexpr int kSms = 132;
constexpr int64_t kSharedBytesPerSm = 228 * 1024, kReservedPerBlock = 1024;

struct DecodeCase {
  int batch, heads, keys, head_dim, group;
};

DecodeProblemShape shape_of(const DecodeCase &c) {
  return {.head_dim = c.head_dim,
          .group = c.group,
          .batch_kv_heads = int64_t(c.batch) * (c.heads / c.group),
          .keys = c.keys,
          .element_bytes = 2};
}

}  // namespace

TEST_CASE("the decode rule keeps 128 KB in flight per SM on 4 or 2 blocks, and its parts fill the waves") {
  // The suite's decode problems, then problems outside it.
  for (const DecodeCase &c :
       {DecodeCase{1, 8, 32768, 128, 1}, DecodeCase{8, 8, 8192, 128, 1}, DecodeCase{1, 32, 131072, 128, 1},
        DecodeCase{1, 32, 131072, 128, 4}, DecodeCase{4, 32, 16384, 128, 8}, DecodeCase{16, 16, 4096, 128, 1},
        DecodeCase{1, 64, 65536, 128, 8}, DecodeCase{32, 8, 2048, 128, 1}, DecodeCase{2, 16, 30000, 64, 2},
        DecodeCase{1, 16, 20000, 256, 4}}) {
    const DecodeProblemShape p = shape_of(c);
    const AttentionTiling t = decode_tiling(p);
    INFO("B", c.batch, " H", c.heads, " L", c.keys, " D", c.head_dim, " group ", c.group, ": ", t.name());
    // The ring and Q as lower() stages them, 4 or 2 of them on an SM; at least 2 tiles ahead of each block's
    // compute.
    Attention a = make_attention({.dtype = f16, .head_dim = c.head_dim, .group = c.group, .decode = true});
    const LoweredProgram lowered = lower(a.out, schedule_decode(a, t), Target::sm90a());
    CHECK(lowered.kernels[0].shared_bytes == decode_shared_bytes(p, t));
    CHECK((t.min_blocks_per_sm == 4 || t.min_blocks_per_sm == 2));
    CHECK(t.split_combine == SplitCombine::kernel);  // the last block measured slower (attention.h)
    CHECK((lowered.kernels[0].shared_bytes + kReservedPerBlock) * t.min_blocks_per_sm <= kSharedBytesPerSm);
    CHECK(2 * t.key_tile * c.head_dim * 2 == 16 * 1024);
    CHECK(t.min_blocks_per_sm * (t.stages - 1) * 16 * 1024 >= 128 * 1024);
    // Long keys and few (batch, key/value head) pairs: the parts fill at least 90% of the blocks' waves.
    const int64_t blocks = p.batch_kv_heads * t.split_kv, slots = int64_t(kSms) * t.min_blocks_per_sm;
    const int64_t waves = (blocks + slots - 1) / slots;
    CHECK(double(blocks) >= 0.9 * double(waves * slots));
    // No part is empty: the last part starts before the last tile.
    const int64_t tiles = (c.keys + t.key_tile - 1) / t.key_tile;
    CHECK((t.split_kv - 1) * ((tiles + t.split_kv - 1) / t.split_kv) < tiles);
  }
  // The suite's smallest problem by the numbers in apps/attention/attention.h: 32 parts of 32 tiles of 32
  // keys on 2 blocks per SM with 7 slots each, 256 blocks on the 264 slots: the same wave and bytes in
  // flight as 64 parts on 4 blocks of 3 slots, and one round of the combine's chains fewer.
  const AttentionTiling small = decode_tiling(shape_of({1, 8, 32768, 128, 1}));
  CHECK(small.key_tile == 32);
  CHECK(small.stages == 7);
  CHECK(small.min_blocks_per_sm == 2);
  CHECK(small.split_kv == 32);
  // Few parts either way (8 or 4, one round of the combine): 4 blocks per SM, a warp on each scheduler.
  const AttentionTiling few = decode_tiling(shape_of({8, 8, 8192, 128, 1}));
  CHECK(few.min_blocks_per_sm == 4);
  CHECK(few.split_kv == 8);
  // Pairs enough to fill the machine on their own: no split, so no combine kernel.
  CHECK(decode_tiling(shape_of({64, 32, 4096, 128, 1})).split_kv == 1);
  // Fewer keys than a tile: the tile is the keys rounded up to 16.
  CHECK(decode_tiling(shape_of({1, 8, 20, 128, 1})).key_tile == 32);
  CHECK(decode_tiling(shape_of({1, 8, 20, 64, 1})).key_tile == 32);
}

TEST_CASE(
    "the decode rule's tilings match the oracle: grouped-query, odd lengths, a window, parts of a tile") {
  struct Problem {
    const char *name;
    AttentionOptions options;
    int batch, heads, keys;
  };
  for (const Problem &c :
       {Problem{
            "D 64, 1000 keys", {.dtype = f16, .head_dim = 64, .decode = true, .prefix = "rd1"}, 1, 2, 1000},
        Problem{"D 128, GQA 4, 777 keys",
                {.dtype = bf16, .head_dim = 128, .group = 4, .decode = true, .prefix = "rd2"},
                1,
                8,
                777},
        Problem{"D 64, GQA 8, a window of 100 over 513 keys",
                {.dtype = f16, .head_dim = 64, .group = 8, .window = 100, .decode = true, .prefix = "rd3"},
                2,
                8,
                513}}) {
    Attention a = make_attention(c.options);
    const AttentionTiling t = decode_tiling({.head_dim = c.options.head_dim,
                                             .group = c.options.group,
                                             .batch_kv_heads = int64_t(c.batch) * (c.heads / c.options.group),
                                             .keys = c.keys,
                                             .element_bytes = 2});
    const auto scalars = attention_sizes(a, c.batch, c.heads, 1, c.keys);
    const Schedule s = schedule_decode(a, t);
    const double err = lowered_error(a.out, s, random_inputs(a.out, scalars, 21), scalars);
    INFO(c.name, " (", t.name(), "): error ", err);
    CHECK(t.split_kv > 1);
    CHECK(err < (c.options.dtype == f16 ? 2e-3 : 1e-2));
  }
}

TEST_CASE(
    "decoding with a split that does not divide the key tiles, on a ring it wraps, compiles and matches") {
  // 16 tiles of 64 keys (the last of 40) in 5 parts of 4, so that each part wraps a ring of 3 slots and the
  // fifth has no tile left (its state is the identity); the combine takes 5 chains of one part.
  Attention a = make_attention({.dtype = f16, .head_dim = 64, .group = 2, .decode = true, .prefix = "rd5"});
  AttentionTiling t = decode_tiling({.head_dim = 64, .group = 2, .batch_kv_heads = 2, .keys = 1000});
  REQUIRE(t.key_tile == 64);
  t.stages = 3;
  t.split_kv = 5;
  const auto scalars = attention_sizes(a, 1, 4, 1, 1000);
  const Schedule s = schedule_decode(a, t);
  const LoweredProgram p = lower(a.out, s, Target::sm90a());
  REQUIRE(p.kernels.size() == 2);
  CHECK(p.kernels[1].schedule_summary.find("folds 5 partial states") != std::string::npos);
  CHECK(lowered_error(a.out, s, random_inputs(a.out, scalars, 22), scalars) < 2e-3);
  compile_for_both_targets(p);
}

TEST_CASE(
    "split combines whose chains do not divide the parts keep the order of a monoid that does not commute") {
  // The affine maps h -> a h + b compose in sequence order only. 13 parts: 13 chains of one, combined
  // pairwise with one left over at each level; 40 parts: 16 chains of 3, the last two empty and one of a
  // single part.
  const AffineRows affine = affine_rows("odd");
  const Func &f = affine.f;
  REQUIRE_FALSE(algebra::affine(f64).commutative);
  for (const int parts : {13, 40}) {
    Schedule s;
    s[f].split("i", "io", "it", 32)
        .bind("io", Binding::block_x)
        .bind("it", Binding::thread)
        .split_reduction("odd_r.x", parts);
    for (const int n : {37, 1000}) {
      INFO(parts, " parts, length ", n);
      const std::map<std::string, double> sizes = {{"odd_rows", 3}, {"odd_cols", n}};
      CHECK(lowered_error(f, s, random_inputs(f, sizes, 23), sizes) < 1e-9);
    }
  }
}
