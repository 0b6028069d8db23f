// Attention through the chained lowering (a contraction computed at the key tile feeding the attention
// monoid), run on the interpreter against the algorithm oracle, and compiled for both targets.
#include <doctest/doctest.h>

#include <cmath>

#include "apps/attention/attention.h"
#include "scheduler/arguments.h"
#include "scheduler/lower.h"
#include "tests/scheduler/attention_support.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using namespace twist::apps;
using twist::testing::attention_sizes;
using twist::testing::compile_for_both_targets;
using twist::testing::lowered_error;
using twist::testing::random_inputs;

namespace {

AttentionTiling small_tiling() {
  AttentionTiling t;
  t.block_rows = 32, t.key_tile = 32, t.stages = 2;
  return t;
}

}  // namespace

TEST_CASE("attention lowers to one chained kernel that matches the oracle (f16, bf16; D 64)") {
  for (const Type &type : {f16, bf16}) {
    Attention a = make_attention({.dtype = type, .head_dim = 64, .prefix = type_name(type)});
    const auto scalars = attention_sizes(a, 1, 2, 45, 70);
    const Schedule s = schedule_attention(a, small_tiling());
    const double err = lowered_error(a.out, s, random_inputs(a.out, scalars, 3), scalars);
    INFO(type_name(type), " error ", err);
    CHECK(err < (type == f16 ? 2e-3 : 1e-2));
    compile_for_both_targets(lower(a.out, s, Target::sm90a()));
  }
}

TEST_CASE("causal attention with fully masked rows, and key lengths the tiles do not divide") {
  // More queries than keys: with the mask aligned at the bottom right, the first 30 queries see no key and
  // must finalize to 0, not NaN.
  Attention a = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = "c"});
  for (auto [s, l] : {std::pair{70, 40}, std::pair{50, 77}}) {
    const auto scalars = attention_sizes(a, 2, 1, s, l);
    const double err = lowered_error(a.out, schedule_attention(a, small_tiling()),
                                     random_inputs(a.out, scalars, 8), scalars);
    INFO(s, " queries, ", l, " keys: error ", err);
    CHECK(err < 2e-3);
  }
}

TEST_CASE("two atoms of rows per warp read Q from shared memory at every k-step and match the oracle") {
  // Causal with a key length the tiles do not divide, so that both row atoms of a warp see masked tiles.
  Attention a = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = "w32"});
  AttentionTiling t = small_tiling();
  t.block_rows = 64, t.warp_rows = 32;
  const auto scalars = attention_sizes(a, 1, 2, 70, 83);
  const Schedule s = schedule_attention(a, t);
  const LoweredProgram p = lower(a.out, s, Target::sm90a());
  CHECK(p.kernels[0].threads == 64);  // 2 warps of 32 rows
  CHECK(lowered_error(a.out, s, random_inputs(a.out, scalars, 11), scalars) < 2e-3);
  compile_for_both_targets(p);
}

TEST_CASE("split-KV attention: the key loop across blocks, combined with the monoid's combine") {
  Attention a = make_attention({.dtype = f16, .head_dim = 64, .causal = true, .prefix = "sk"});
  AttentionTiling t = small_tiling();
  t.split_kv = 3;
  const auto scalars = attention_sizes(a, 1, 2, 33, 150);
  const LoweredProgram p = lower(a.out, schedule_attention(a, t), Target::sm90a());
  CHECK(p.kernels.size() == 2);
  CHECK(p.kernels[1].schedule_summary.find("folds 3 partial states") != std::string::npos);
  CHECK(lowered_error(a.out, schedule_attention(a, t), random_inputs(a.out, scalars, 9), scalars) < 2e-3);
  compile_for_both_targets(p);
}

TEST_CASE("grouped-query decoding: query heads of a group packed into one atom's rows, keys split") {
  Attention a = make_attention({.dtype = bf16, .head_dim = 64, .group = 4, .decode = true, .prefix = "dec"});
  AttentionTiling t;
  t.key_tile = 32, t.stages = 3, t.split_kv = 4;
  const auto scalars = attention_sizes(a, 2, 8, 1, 300);
  const Schedule s = schedule_decode(a, t);
  CHECK(lowered_error(a.out, s, random_inputs(a.out, scalars, 10), scalars) < 1e-2);
  compile_for_both_targets(lower(a.out, s, Target::sm90a()));
}

TEST_CASE("unsplit grouped-query decoding writes its packed rows back without a shared-memory race") {
  // One block folds all the keys, so the kernel itself writes `out` (no combine kernel after it); the
  // interpreter checks shared memory for races.
  for (int group : {1, 2, 4})
    for (int d : {16, 64}) {
      Attention a = make_attention({.dtype = bf16,
                                    .head_dim = d,
                                    .group = group,
                                    .decode = true,
                                    .prefix = "dec1_g" + std::to_string(group) + "_d" + std::to_string(d)});
      AttentionTiling t;
      t.key_tile = 32, t.stages = 3, t.split_kv = 1;
      const auto scalars = attention_sizes(a, 2, 8, 1, 100);
      const Schedule s = schedule_decode(a, t);
      const LoweredProgram p = lower(a.out, s, Target::sm90a());
      CHECK(p.kernels.size() == 1);
      const double err = lowered_error(a.out, s, random_inputs(a.out, scalars, 14), scalars);
      INFO("group ", group, ", D ", d, ": error ", err);
      CHECK(err < 1e-2);
    }
}

TEST_CASE("the same program with soft-capping, ALiBi and a sliding window needs no backend work") {
  struct Variant {
    const char *name;
    AttentionOptions options;
  };
  for (const Variant &v :
       {Variant{"softcap", {.head_dim = 64, .softcap = 20.0f, .prefix = "cap"}},
        Variant{"alibi", {.head_dim = 64, .causal = true, .alibi = true, .prefix = "alibi"}},
        Variant{"window", {.head_dim = 64, .causal = true, .window = 24, .prefix = "win"}},
        Variant{"gqa", {.head_dim = 64, .group = 2, .causal = true, .prefix = "gqa"}}}) {
    Attention a = make_attention(v.options);
    const auto scalars = attention_sizes(a, 1, 4, 61, 61);
    auto inputs = random_inputs(a.out, scalars, 12);
    const double err = lowered_error(a.out, schedule_attention(a, small_tiling()), inputs, scalars);
    INFO(v.name, " error ", err);
    CHECK(err < 2e-3);
  }
}

TEST_CASE("attention kernels for head dimensions 128 and 256 compile for sm_80 and sm_90a") {
  for (int d : {128, 256}) {
    Attention a =
        make_attention({.dtype = f16, .head_dim = d, .causal = true, .prefix = "hd" + std::to_string(d)});
    AttentionTiling t;
    t.key_tile = d == 256 ? 32 : 64;
    const auto sources = compile_for_both_targets(lower(a.out, schedule_attention(a, t), Target::sm90a()));
    CHECK(sources[0].find("__shfl_xor_sync") != std::string::npos);
    CHECK(sources[0].find("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") != std::string::npos);
  }
}

TEST_CASE(
    "scores scaled by a positive parameter take the tile maximum before scaling; other scales fall back") {
  Attention a = make_attention({.dtype = f16, .head_dim = 64, .prefix = "scaled"});
  const Schedule s = schedule_attention(a, small_tiling());
  const LoweredProgram p = lower(a.out, s, Target::sm90a());
  const Kernel &k = p.kernels.front();
  // The main kernel assumes the scale positive; its fallback assumes nothing.
  bool positive = false;
  for (const Requirement &r : k.requirements)
    positive = positive || r.why.find("must be positive") != std::string::npos;
  CHECK(positive);
  REQUIRE(k.fallback);
  CHECK(k.fallback->requirements.empty());
  // Both give the oracle's answer: a negative scale runs the fallback, whose maxima are of the scaled scores.
  for (double scale : {0.18, -0.3}) {
    auto scalars = attention_sizes(a, 1, 2, 40, 67);
    scalars[a.qk_scale.name()] = scale;
    CHECK(&select_variant(k, scalars) == (scale > 0 ? &k : k.fallback.get()));
    const double err = lowered_error(a.out, s, random_inputs(a.out, scalars, 5), scalars);
    INFO("scale ", scale, ": error ", err);
    CHECK(err < 2e-3);
  }
}
