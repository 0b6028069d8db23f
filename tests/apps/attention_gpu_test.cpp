// Attention programs on the GPU against the algorithm oracle: prefill (plain, causal with masked rows,
// grouped-query, soft-capped, ALiBi, sliding window), split-KV and packed grouped-query decoding.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "apps/attention/attention.h"
#include "backends/cuda/program/gpu_program.h"
#include "backends/reference/evaluate_funcs.h"
#include "scheduler/lower.h"
#include "tests/gpu_support.h"

using namespace twist;
using namespace twist::apps;
using reference::HostTensor;

namespace {

struct Case {
  std::string name;
  AttentionOptions options;
  int batch, heads, queries, keys;
  AttentionTiling tiling;
};

double gpu_error(const Case &c) {
  static cuda::Device device;
  Attention a = make_attention(c.options);
  const Schedule s = c.options.decode ? schedule_decode(a, c.tiling) : schedule_attention(a, c.tiling);
  const LoweredProgram p = lower(a.out, s, Target::sm90a());
  cuda::GpuProgram gpu(p, device);
  const int kv_heads = c.heads / c.options.group, d = c.options.head_dim;
  std::map<std::string, HostTensor> inputs = {
      {a.Q.name(), reference::random_normal(c.options.dtype, {c.batch, c.heads, c.queries, d}, 1)},
      {a.K.name(), reference::random_normal(c.options.dtype, {c.batch, kv_heads, c.keys, d}, 2)},
      {a.V.name(), reference::random_normal(c.options.dtype, {c.batch, kv_heads, c.keys, d}, 3)}};
  if (a.slopes) inputs.emplace(a.slopes->name(), reference::random_uniform(f32, {c.heads}, 4, 0.01, 0.5));
  const std::map<std::string, double> scalars = {
      {a.qk_scale.name(), std::log2(std::exp(1.0)) / std::sqrt(double(d))}, {a.queries.name(), c.queries}};
  const HostTensor got = gpu.run(inputs, scalars).at(a.out.name());
  const HostTensor want = reference::evaluate(a.out, {inputs, scalars}, Arithmetic::exact)[0];
  HostTensor wide(f64, got.shape());
  for (int64_t e = 0; e < got.size(); ++e) wide.set_linear(e, got.get_linear(e));
  const double err = reference::relative_l2_error(wide, want);
  if (err > 1e-2) {
    // Where it goes wrong says more than how much: the first few elements off by more than 5%.
    int shown = 0;
    for (int64_t e = 0; e < got.size() && shown < 8; ++e) {
      const double g = wide.get_linear(e), w = want.get_linear(e);
      if (!(std::abs(g - w) <= 0.05 * (std::abs(w) + 0.05))) {
        const int64_t d = e % c.options.head_dim, i = e / c.options.head_dim % c.queries;
        const int64_t h = e / c.options.head_dim / c.queries % c.heads,
                      b = e / c.options.head_dim / c.queries / c.heads;
        MESSAGE(c.name, ": out[", b, ", ", h, ", ", i, ", ", d, "] = ", g, ", expected ", w);
        ++shown;
      }
    }
  }
  return err;
}

// Each case on the GPU against the exact oracle: relative L2 error under 2e-3 in f16, 1e-2 in bf16.
void check_cases(const std::vector<Case> &cases) {
  for (const Case &c : cases) {
    const double err = gpu_error(c);
    INFO(c.name, " (", c.tiling.name(), "): relative L2 error ", err);
    CHECK(err < (c.options.dtype == f16 ? 2e-3 : 1e-2));
  }
}

}  // namespace

TEST_CASE("GPU: attention prefill and its generality variants match the oracle") {
  TWIST_REQUIRE_GPU();
  AttentionTiling big;  // the benchmark's tiling
  AttentionTiling d256;
  d256.key_tile = 32;
  check_cases({
      Case{"f16 D64", {.dtype = f16, .head_dim = 64, .prefix = "a"}, 2, 3, 200, 200, big},
      Case{"bf16 D128 causal",
           {.dtype = bf16, .head_dim = 128, .causal = true, .prefix = "b"},
           1,
           2,
           300,
           300,
           big},
      Case{"f16 D128 causal, more queries than keys",
           {.dtype = f16, .head_dim = 128, .causal = true, .prefix = "c"},
           1,
           2,
           190,
           90,
           big},
      Case{"f16 D256 ragged keys", {.dtype = f16, .head_dim = 256, .prefix = "d"}, 1, 2, 130, 77, d256},
      Case{"f16 D128 GQA 4",
           {.dtype = f16, .head_dim = 128, .group = 4, .causal = true, .prefix = "e"},
           1,
           8,
           150,
           150,
           big},
      Case{"soft-capping",
           {.dtype = f16, .head_dim = 64, .softcap = 20.0f, .prefix = "f"},
           1,
           2,
           100,
           160,
           big},
      Case{"ALiBi",
           {.dtype = f16, .head_dim = 64, .causal = true, .alibi = true, .prefix = "g"},
           1,
           4,
           129,
           129,
           big},
      Case{"sliding window",
           {.dtype = f16, .head_dim = 64, .causal = true, .window = 40, .prefix = "h"},
           1,
           2,
           257,
           257,
           big},
  });
}

namespace {

// The case under the rule's Hopper tiling for its own shape (apps::hopper_attention_tiling).
Case hopper(Case c) {
  c.tiling = hopper_attention_tiling({.head_dim = c.options.head_dim,
                                      .causal = c.options.causal,
                                      .batch_heads = int64_t(c.batch) * c.heads,
                                      .queries = c.queries,
                                      .keys = c.keys,
                                      .group = c.options.group,
                                      .element_bytes = c.options.dtype.bytes()});
  return c;
}

}  // namespace

TEST_CASE("GPU: attention prefill on the Hopper datapath (TMA and wgmma) and its variants match the oracle") {
  TWIST_REQUIRE_GPU();
  AttentionTiling two_warpgroups =
      hopper_attention_tiling({.batch_heads = 1000, .queries = 4096, .keys = 4096});
  check_cases({
      hopper(Case{"f16 D64", {.dtype = f16, .head_dim = 64, .prefix = "ha"}, 2, 3, 200, 200, {}}),
      hopper(Case{"bf16 D128 causal",
                  {.dtype = bf16, .head_dim = 128, .causal = true, .prefix = "hb"},
                  1,
                  2,
                  300,
                  300,
                  {}}),
      hopper(Case{"f16 D128 causal, more queries than keys",
                  {.dtype = f16, .head_dim = 128, .causal = true, .prefix = "hc"},
                  1,
                  2,
                  190,
                  90,
                  {}}),
      hopper(
          Case{"f16 D256 ragged keys", {.dtype = f16, .head_dim = 256, .prefix = "hd"}, 1, 2, 130, 77, {}}),
      hopper(Case{"f16 D128 GQA 4",
                  {.dtype = f16, .head_dim = 128, .group = 4, .causal = true, .prefix = "he"},
                  1,
                  8,
                  150,
                  150,
                  {}}),
      hopper(Case{"soft-capping",
                  {.dtype = f16, .head_dim = 64, .softcap = 20.0f, .prefix = "hf"},
                  1,
                  2,
                  100,
                  160,
                  {}}),
      hopper(Case{"ALiBi",
                  {.dtype = f16, .head_dim = 64, .causal = true, .alibi = true, .prefix = "hg"},
                  1,
                  4,
                  129,
                  129,
                  {}}),
      hopper(Case{"sliding window",
                  {.dtype = f16, .head_dim = 64, .causal = true, .window = 40, .prefix = "hh"},
                  1,
                  2,
                  257,
                  257,
                  {}}),
      Case{"f16 D128 causal, two warpgroups",
           {.dtype = f16, .head_dim = 128, .causal = true, .prefix = "hi"},
           1,
           2,
           300,
           300,
           two_warpgroups},
      Case{"bf16 D64 GQA 4, two heads per block",
           {.dtype = bf16, .head_dim = 64, .group = 4, .causal = true, .prefix = "hk"},
           2,
           8,
           130,
           170,
           two_warpgroups},
      Case{"bf16 D256 two warpgroups",
           {.dtype = bf16, .head_dim = 256, .prefix = "hj"},
           1,
           2,
           140,
           133,
           hopper_attention_tiling({.head_dim = 256, .batch_heads = 1000, .queries = 4096, .keys = 4096})},
  });
}

// The rule's tilings with the next key tile's S in flight during this tile's softmax (overlap_producer).
TEST_CASE("GPU: Hopper attention with the next tile's S overlapping this tile's softmax matches the oracle") {
  TWIST_REQUIRE_GPU();
  auto overlapped = [](int head_dim, bool causal) {
    AttentionTiling t = hopper_attention_tiling(
        {.head_dim = head_dim, .causal = causal, .batch_heads = 1000, .queries = 4096, .keys = 4096});
    t.warp_specialized = false, t.ping_pong = false, t.overlap_scores = true;
    return t;
  };
  check_cases({
      Case{"f16 D128",
           {.dtype = f16, .head_dim = 128, .prefix = "ho1"},
           1,
           2,
           300,
           333,
           overlapped(128, false)},
      Case{"bf16 D128 causal, masked rows",
           {.dtype = bf16, .head_dim = 128, .causal = true, .prefix = "ho2"},
           1,
           2,
           190,
           90,
           overlapped(128, true)},
      Case{"f16 D64 GQA 2 causal",
           {.dtype = f16, .head_dim = 64, .group = 2, .causal = true, .prefix = "ho3"},
           2,
           4,
           130,
           170,
           overlapped(64, true)},
      Case{"f16 D256 ragged keys",
           {.dtype = f16, .head_dim = 256, .prefix = "ho4"},
           1,
           2,
           140,
           77,
           overlapped(256, false)},
  });
}

// Each key tile's P V issued after the next tile's S and waited for after that tile's softmax
// (delay_column_products, which needs a producer warpgroup), on 2 and 3 slots.
TEST_CASE(
    "GPU: Hopper attention with each tile's P V in flight during the next tile's softmax matches the "
    "oracle") {
  TWIST_REQUIRE_GPU();
  auto delayed = [](int head_dim, bool causal, int key_tile, int stages) {
    AttentionTiling t = hopper_attention_tiling(
        {.head_dim = head_dim, .causal = causal, .batch_heads = 1000, .queries = 4096, .keys = 4096});
    t.overlap_scores = false, t.ping_pong = false, t.delay_products = true, t.warp_specialized = true;
    t.key_tile = key_tile, t.stages = stages, t.min_blocks_per_sm = 1;
    return t;
  };
  check_cases({
      Case{"f16 D128, 128-key tiles, 2 slots",
           {.dtype = f16, .head_dim = 128, .prefix = "hd1"},
           1,
           2,
           300,
           333,
           delayed(128, false, 128, 2)},
      Case{"bf16 D128 causal, masked rows, 3 slots",
           {.dtype = bf16, .head_dim = 128, .causal = true, .prefix = "hd2"},
           1,
           2,
           190,
           90,
           delayed(128, true, 128, 3)},
      Case{"f16 D64 GQA 2 causal, 128-key tiles",
           {.dtype = f16, .head_dim = 64, .group = 2, .causal = true, .prefix = "hd3"},
           2,
           4,
           130,
           170,
           delayed(64, true, 128, 2)},
      Case{"f16 D256 ragged keys",
           {.dtype = f16, .head_dim = 256, .prefix = "hd4"},
           1,
           2,
           140,
           77,
           delayed(256, false, 64, 2)},
  });
}

// A producer warpgroup issuing every TMA copy (warp_specialize) on the rule's tilings and on wider key tiles,
// alone and with the next key tile's S in flight during this tile's softmax; a case of its own each, so that
// one that hangs is named by its own timeout.
namespace {

AttentionTiling specialized(int head_dim, bool causal, int key_tile = 0, bool overlap = false) {
  AttentionTiling t = hopper_attention_tiling(
      {.head_dim = head_dim, .causal = causal, .batch_heads = 1000, .queries = 4096, .keys = 4096});
  t.warp_specialized = true, t.ping_pong = false;
  if (key_tile > 0) t.key_tile = key_tile;
  // The rule's third slot is the overlap's (D 128 without a causal mask); 176-key tiles fit only two.
  if (!overlap) t.stages = 2;
  t.overlap_scores = overlap;
  return t;
}

}  // namespace

TEST_CASE("GPU: warp-specialized Hopper attention at the rule's tilings matches the oracle") {
  TWIST_REQUIRE_GPU();
  check_cases({
      Case{"f16 D64, two blocks per SM",
           {.dtype = f16, .head_dim = 64, .prefix = "hw1"},
           2,
           3,
           200,
           200,
           specialized(64, false)},
      Case{"bf16 D128 causal, masked rows",
           {.dtype = bf16, .head_dim = 128, .causal = true, .prefix = "hw2"},
           1,
           2,
           190,
           90,
           specialized(128, true)},
      Case{"f16 D128 GQA 4 causal",
           {.dtype = f16, .head_dim = 128, .group = 4, .causal = true, .prefix = "hw3"},
           1,
           8,
           150,
           150,
           specialized(128, true)},
      Case{"f16 D256 ragged keys",
           {.dtype = f16, .head_dim = 256, .prefix = "hw8"},
           1,
           2,
           130,
           77,
           specialized(256, false)},
      Case{"sliding window",
           {.dtype = f16, .head_dim = 64, .causal = true, .window = 40, .prefix = "hwa"},
           1,
           2,
           257,
           257,
           specialized(64, true)},
  });
}

TEST_CASE("GPU: warp-specialized Hopper attention with 176- and 192-key tiles matches the oracle") {
  TWIST_REQUIRE_GPU();
  check_cases({
      Case{"f16 D128, 176-key tiles",
           {.dtype = f16, .head_dim = 128, .prefix = "hw4"},
           1,
           2,
           300,
           333,
           specialized(128, false, 176)},
      Case{"f16 D128 causal, 192-key tiles",
           {.dtype = f16, .head_dim = 128, .causal = true, .prefix = "hw5"},
           1,
           2,
           300,
           300,
           specialized(128, true, 192)},
  });
}

TEST_CASE("GPU: warp-specialized Hopper attention with the next tile's S overlapped matches the oracle") {
  TWIST_REQUIRE_GPU();
  check_cases({
      Case{"f16 D128",
           {.dtype = f16, .head_dim = 128, .prefix = "hw6"},
           1,
           2,
           300,
           333,
           specialized(128, false, 0, true)},
      Case{"bf16 D128 causal, masked rows",
           {.dtype = bf16, .head_dim = 128, .causal = true, .prefix = "hw7"},
           1,
           2,
           190,
           90,
           specialized(128, true, 0, true)},
      Case{"f16 D256 ragged keys",
           {.dtype = f16, .head_dim = 256, .prefix = "hw9"},
           1,
           2,
           140,
           77,
           specialized(256, false, 0, true)},
  });
}

// The same for the sanitizers, warp-specialized: the producer's refills against the consumers' releases.
TEST_CASE(
    "GPU: warp-specialized Hopper attention with masked rows and grouped-query heads (for the sanitizers)") {
  TWIST_REQUIRE_GPU();
  AttentionTiling t = hopper_attention_tiling({.batch_heads = 1000, .queries = 4096, .keys = 4096});
  t.warp_specialized = true, t.ping_pong = false, t.overlap_scores = false;
  const Case c{"causal GQA 2, masked rows",
               {.dtype = f16, .head_dim = 128, .group = 2, .causal = true, .prefix = "hws"},
               1,
               4,
               190,
               300,
               t};
  const double err = gpu_error(c);
  INFO(c.name, " (", c.tiling.name(), "): relative L2 error ", err);
  CHECK(err < 2e-3);
}

// The same for the sanitizers with the next tile's S overlapped (two sets of S accumulators taking turns by
// the tile's parity), warp-specialized, alone and in ping-pong.
TEST_CASE("GPU: overlapped Hopper attention with masked rows and grouped-query heads (for the sanitizers)") {
  TWIST_REQUIRE_GPU();
  for (bool ping_pong : {false, true}) {
    AttentionTiling t = specialized(128, true, 0, true);
    t.ping_pong = ping_pong;
    const std::string prefix = ping_pong ? "hosp" : "hos";
    const Case c{"causal GQA 2, a ring that wraps",
                 {.dtype = f16, .head_dim = 128, .group = 2, .causal = true, .prefix = prefix},
                 1,
                 4,
                 190,
                 300,
                 t};
    const double err = gpu_error(c);
    INFO(c.name, " (", c.tiling.name(), "): relative L2 error ", err);
    CHECK(err < 2e-3);
  }
}

// Ping-pong (WarpSpecialization::ping_pong): the two consumer warpgroups take turns on the tensor cores
// through named barriers, on the rule's tilings, on 176-key tiles and with the next tile's S overlapped.
namespace {

AttentionTiling ping_pong(int head_dim, bool causal, bool overlap = false, int key_tile = 0) {
  AttentionTiling t = specialized(head_dim, causal, key_tile, overlap);
  t.ping_pong = true;
  return t;
}

}  // namespace

TEST_CASE("GPU: ping-pong Hopper attention matches the oracle") {
  TWIST_REQUIRE_GPU();
  check_cases({
      Case{"f16 D128 causal GQA 2, masked rows",
           {.dtype = f16, .head_dim = 128, .group = 2, .causal = true, .prefix = "hp1"},
           1,
           4,
           190,
           300,
           ping_pong(128, true)},
      Case{"bf16 D128, ragged keys",
           {.dtype = bf16, .head_dim = 128, .prefix = "hp2"},
           1,
           2,
           300,
           333,
           ping_pong(128, false)},
      Case{"f16 D64", {.dtype = f16, .head_dim = 64, .prefix = "hp3"}, 2, 3, 200, 200, ping_pong(64, false)},
      Case{"f16 D256 causal",
           {.dtype = f16, .head_dim = 256, .causal = true, .prefix = "hp4"},
           1,
           2,
           130,
           77,
           ping_pong(256, true)},
      Case{"f16 D128 causal, the next S overlapped",
           {.dtype = f16, .head_dim = 128, .causal = true, .prefix = "hp5"},
           1,
           2,
           190,
           90,
           ping_pong(128, true, true)},
      Case{"f16 D128, 176-key tiles",
           {.dtype = f16, .head_dim = 128, .prefix = "hp6"},
           1,
           2,
           300,
           333,
           ping_pong(128, false, false, 176)},
  });
}

// The same for the sanitizers (racecheck, synccheck): the turns on the named barriers, with masked rows,
// grouped-query heads and a ring that wraps.
TEST_CASE("GPU: ping-pong Hopper attention with masked rows and grouped-query heads (for the sanitizers)") {
  TWIST_REQUIRE_GPU();
  const Case c{"causal GQA 2, masked rows",
               {.dtype = f16, .head_dim = 128, .group = 2, .causal = true, .prefix = "hps"},
               1,
               4,
               190,
               300,
               ping_pong(128, true)};
  const double err = gpu_error(c);
  INFO(c.name, " (", c.tiling.name(), "): relative L2 error ", err);
  CHECK(err < 2e-3);
}

// Ping-pong with the delayed column products (FlashAttention-3's full order): a warpgroup's turn issues tile
// r's S and tile r - 1's P V and is passed before their waits; the last tile's products after the loop.
namespace {

AttentionTiling delayed_ping_pong(int head_dim, bool causal, int key_tile, int stages) {
  AttentionTiling t = ping_pong(head_dim, causal, false, key_tile);
  // One block per SM: the rule's two blocks at D 64 leave the consumers 104 registers, too few for S, P and
  // the column accumulators of a 128-key tile.
  t.delay_products = true, t.stages = stages, t.min_blocks_per_sm = 1;
  return t;
}

}  // namespace

TEST_CASE("GPU: ping-pong Hopper attention with delayed column products matches the oracle") {
  TWIST_REQUIRE_GPU();
  check_cases({
      Case{"f16 D128, ragged keys, 2 slots",
           {.dtype = f16, .head_dim = 128, .prefix = "hdp1"},
           1,
           2,
           300,
           333,
           delayed_ping_pong(128, false, 128, 2)},
      Case{"bf16 D128 causal, masked rows, 3 slots",
           {.dtype = bf16, .head_dim = 128, .causal = true, .prefix = "hdp2"},
           1,
           2,
           190,
           90,
           delayed_ping_pong(128, true, 128, 3)},
      Case{"f16 D128, 176-key tiles",
           {.dtype = f16, .head_dim = 128, .prefix = "hdp3"},
           1,
           2,
           300,
           333,
           delayed_ping_pong(128, false, 176, 2)},
      Case{"f16 D64 GQA 2 causal, 128-key tiles",
           {.dtype = f16, .head_dim = 64, .group = 2, .causal = true, .prefix = "hdp4"},
           2,
           4,
           130,
           170,
           delayed_ping_pong(64, true, 128, 2)},
      Case{"f16 D256 ragged keys",
           {.dtype = f16, .head_dim = 256, .prefix = "hdp5"},
           1,
           2,
           140,
           77,
           delayed_ping_pong(256, false, 80, 2)},
  });
}

// The same for the sanitizers (racecheck, synccheck): the turns around S and the delayed P V, with masked
// rows, grouped-query heads, a ring that wraps and the products after the loop.
TEST_CASE(
    "GPU: ping-pong Hopper attention with delayed column products on masked rows and grouped-query heads "
    "(for the sanitizers)") {
  TWIST_REQUIRE_GPU();
  check_cases({Case{"causal GQA 2, masked rows",
                    {.dtype = f16, .head_dim = 128, .group = 2, .causal = true, .prefix = "hdps"},
                    1,
                    4,
                    190,
                    300,
                    delayed_ping_pong(128, true, 128, 2)}});
}

// One small case for the sanitizers: causal with rows that see no key, two query heads of a group per block
// (its two warpgroups), a ring that wraps.
TEST_CASE("GPU: Hopper attention with masked rows and grouped-query heads (for the sanitizers)") {
  TWIST_REQUIRE_GPU();
  const Case c{"causal GQA 2, masked rows",
               {.dtype = f16, .head_dim = 128, .group = 2, .causal = true, .prefix = "hs"},
               1,
               4,
               190,
               300,
               hopper_attention_tiling({.causal = true, .batch_heads = 1000, .queries = 4096, .keys = 4096})};
  const double err = gpu_error(c);
  INFO(c.name, " (", c.tiling.name(), "): relative L2 error ", err);
  CHECK(err < 2e-3);
}

// Persistent grids (AttentionTiling::persistent_blocks): fewer blocks than tiles, each taking its tiles in
// turn, the producer loading a tile's Q and key tiles while the consumers finish the tile before. The rule's
// overlapped D 128 tiling on 3 and 132 blocks, causal with grouped-query heads and masked rows (the tiles'
// key counts differ, so the ring's phases carry on from a running count; the rule's causal tilings take
// the blocks longest first), and the other orders.
namespace {

AttentionTiling persistent(AttentionTiling t, int blocks) {
  t.persistent_blocks = blocks;
  return t;
}

}  // namespace

TEST_CASE("GPU: persistent Hopper attention matches the oracle") {
  TWIST_REQUIRE_GPU();
  // Sizes kept small for the exact oracle, whose time grows with heads x queries x keys x D (about 0.2 us
  // each on one core: 23 s for the first case).
  check_cases({
      Case{"f16 D128 causal GQA 2, masked rows, 3 blocks",
           {.dtype = f16, .head_dim = 128, .group = 2, .causal = true, .prefix = "hpr1"},
           1,
           8,
           390,
           300,
           persistent(specialized(128, true, 112, true), 3)},
      Case{"f16 D64, 132 blocks over 256 tiles",
           {.dtype = f16, .head_dim = 64, .prefix = "hpr2"},
           4,
           8,
           1024,
           64,
           persistent(specialized(64, false), AttentionTiling::kSms)},
      Case{"bf16 D128 causal, longest first, 5 blocks",
           {.dtype = bf16, .head_dim = 128, .causal = true, .prefix = "hpr3"},
           2,
           2,
           700,
           500,
           persistent(specialized(128, true, 112, true), 5)},
  });
}

// The other orders and head dimensions on a persistent grid (a test case of their own, so that the GPU suite
// runs the two halves' exact oracles side by side).
TEST_CASE("GPU: persistent Hopper attention in its other orders and head dimensions matches the oracle") {
  TWIST_REQUIRE_GPU();
  check_cases({
      Case{"f16 D64 causal, producer alone, 4 blocks",
           {.dtype = f16, .head_dim = 64, .causal = true, .prefix = "hpr4"},
           1,
           6,
           500,
           520,
           persistent(specialized(64, true), 4)},
      Case{"f16 D128 ping-pong, delayed products, 3 blocks",
           {.dtype = f16, .head_dim = 128, .causal = true, .prefix = "hpr5"},
           1,
           2,
           600,
           610,
           persistent(delayed_ping_pong(128, true, 128, 3), 3)},
      Case{"f16 D256, 4 blocks",
           {.dtype = f16, .head_dim = 256, .prefix = "hpr6"},
           1,
           2,
           500,
           333,
           persistent(specialized(256, false), 4)},
  });
}

// The same for the sanitizers: a persistent grid of 2 blocks over 4 tiles, causal with grouped-query heads
// and masked rows, the overlapped S.
TEST_CASE("GPU: persistent Hopper attention with masked rows and grouped-query heads (for the sanitizers)") {
  TWIST_REQUIRE_GPU();
  check_cases({Case{"causal GQA 2, masked rows, 2 blocks",
                    {.dtype = f16, .head_dim = 128, .group = 2, .causal = true, .prefix = "hprs"},
                    1,
                    4,
                    190,
                    300,
                    persistent(specialized(128, true, 112, true), 2)}});
}

TEST_CASE("GPU: split-KV prefill and packed grouped-query decoding match the oracle") {
  TWIST_REQUIRE_GPU();
  AttentionTiling split;
  split.split_kv = 5;
  AttentionTiling decode;
  decode.key_tile = 32, decode.stages = 3, decode.split_kv = 16;
  // One block per row atom folds every key and writes `out` itself, through its shared write-back tile.
  AttentionTiling unsplit_decode = decode;
  unsplit_decode.split_kv = 1;
  check_cases({
      Case{"split-KV causal",
           {.dtype = f16, .head_dim = 128, .causal = true, .prefix = "s"},
           1,
           2,
           80,
           1000,
           split},
      Case{"decode", {.dtype = f16, .head_dim = 128, .decode = true, .prefix = "t"}, 2, 4, 1, 3000, decode},
      Case{"decode GQA 4",
           {.dtype = bf16, .head_dim = 128, .group = 4, .decode = true, .prefix = "u"},
           1,
           8,
           1,
           5000,
           decode},
      Case{"unsplit decode GQA 2",
           {.dtype = bf16, .head_dim = 64, .group = 2, .decode = true, .prefix = "v"},
           2,
           8,
           1,
           700,
           unsplit_decode},
  });
}

// Decoding by rule (apps::decode_tiling): the rule's tilings at lengths that give parts of a few tiles, and
// one small case for the sanitizers whose 4 parts each wrap the ring of 3 slots 8 times.
TEST_CASE("GPU: decoding by rule matches the oracle with grouped-query heads and odd lengths and a window") {
  TWIST_REQUIRE_GPU();
  auto by_rule = [](const AttentionOptions &o, int batch, int heads, int keys) {
    return decode_tiling({.head_dim = o.head_dim,
                          .group = o.group,
                          .batch_kv_heads = int64_t(batch) * (heads / o.group),
                          .keys = keys,
                          .element_bytes = 2});
  };
  const AttentionOptions plain{.dtype = f16, .head_dim = 128, .decode = true, .prefix = "r1"};
  const AttentionOptions gqa{.dtype = bf16, .head_dim = 128, .group = 4, .decode = true, .prefix = "r2"};
  const AttentionOptions window{
      .dtype = f16, .head_dim = 64, .group = 8, .window = 3000, .decode = true, .prefix = "r3"};
  for (const Case &c : {Case{"plain, 20011 keys", plain, 1, 2, 1, 20011, by_rule(plain, 1, 2, 20011)},
                        Case{"GQA 4, 12000 keys", gqa, 1, 8, 1, 12000, by_rule(gqa, 1, 8, 12000)},
                        Case{"GQA 8 D 64, a window of 3000 over 9999 keys", window, 1, 16, 1, 9999,
                             by_rule(window, 1, 16, 9999)}}) {
    const double err = gpu_error(c);
    INFO(c.name, " (", c.tiling.name(), "): relative L2 error ", err);
    CHECK(c.tiling.split_kv > 1);
    CHECK(err < (c.options.dtype == f16 ? 2e-3 : 1e-2));
  }
}

TEST_CASE("GPU: decoding on the rule's ring with parts of many tiles (for the sanitizers)") {
  TWIST_REQUIRE_GPU();
  const AttentionOptions o{.dtype = f16, .head_dim = 128, .group = 4, .decode = true, .prefix = "rs"};
  AttentionTiling t = decode_tiling({.head_dim = 128, .group = 4, .batch_kv_heads = 2, .keys = 3000});
  t.split_kv = 4;  // 94 tiles of 32 keys in parts of 24
  const Case c{"GQA 4, 3000 keys in 4 parts", o, 1, 8, 1, 3000, t};
  const double err = gpu_error(c);
  INFO(c.name, " (", t.name(), "): relative L2 error ", err);
  CHECK(t.stages < 24);  // each part's tiles wrap the ring
  CHECK(err < 2e-3);
}

// SplitCombine::last_block: the rule's tilings with each tile's last block folding the parts in the same
// kernel (its arrival counters zeroed by the runtime), and a small case for the sanitizers.
TEST_CASE("GPU: decoding with each tile's last block folding the parts matches the oracle") {
  TWIST_REQUIRE_GPU();
  auto by_rule = [](const AttentionOptions &o, int batch, int heads, int keys) {
    AttentionTiling t = decode_tiling({.head_dim = o.head_dim,
                                       .group = o.group,
                                       .batch_kv_heads = int64_t(batch) * (heads / o.group),
                                       .keys = keys,
                                       .element_bytes = 2});
    t.split_combine = SplitCombine::last_block;
    return t;
  };
  const AttentionOptions plain{.dtype = f16, .head_dim = 128, .decode = true, .prefix = "l1"};
  const AttentionOptions gqa{.dtype = bf16, .head_dim = 128, .group = 4, .decode = true, .prefix = "l2"};
  const AttentionOptions window{
      .dtype = f16, .head_dim = 64, .group = 8, .window = 3000, .decode = true, .prefix = "l3"};
  for (const Case &c : {Case{"plain, 20011 keys", plain, 1, 2, 1, 20011, by_rule(plain, 1, 2, 20011)},
                        Case{"GQA 4, 12000 keys", gqa, 1, 8, 1, 12000, by_rule(gqa, 1, 8, 12000)},
                        Case{"GQA 8 D 64, a window of 3000 over 9999 keys", window, 1, 16, 1, 9999,
                             by_rule(window, 1, 16, 9999)},
                        Case{"B 4, 8 heads, 2048 keys", plain, 4, 8, 1, 2048, by_rule(plain, 4, 8, 2048)}}) {
    const double err = gpu_error(c);
    INFO(c.name, " (", c.tiling.name(), "): relative L2 error ", err);
    CHECK(c.tiling.split_kv > 1);
    CHECK(err < (c.options.dtype == f16 ? 2e-3 : 1e-2));
  }
}

TEST_CASE("GPU: decoding with the last block's fold over parts of many tiles (for the sanitizers)") {
  TWIST_REQUIRE_GPU();
  const AttentionOptions o{.dtype = f16, .head_dim = 128, .group = 4, .decode = true, .prefix = "ls"};
  AttentionTiling t = decode_tiling({.head_dim = 128, .group = 4, .batch_kv_heads = 2, .keys = 3000});
  t.split_kv = 4;
  t.split_combine = SplitCombine::last_block;
  const Case c{"GQA 4, 3000 keys in 4 parts, the last block folding", o, 1, 8, 1, 3000, t};
  const double err = gpu_error(c);
  INFO(c.name, " (", t.name(), "): relative L2 error ", err);
  CHECK(err < 2e-3);
}

// Gemma 4's shapes by the rules: the full layers' D 512 over 8 query heads per key/value head (the output's
// columns across two consumer warpgroups at prefill, two warps when decoding) and the sliding layers' D 256
// with a window. One case a test, so that the GPU suite runs them side by side.
TEST_CASE("GPU: D 512 GQA 8 causal prefill by rule matches the oracle") {
  TWIST_REQUIRE_GPU();
  const AttentionOptions full{.dtype = bf16, .head_dim = 512, .group = 8, .causal = true, .prefix = "g1"};
  const Case c = hopper(Case{"D512 GQA 8 causal", full, 1, 8, 130, 130, {}});
  const double err = gpu_error(c);
  INFO(c.name, " (", c.tiling.name(), "): relative L2 error ", err);
  CHECK(c.tiling.column_parts == 2);
  CHECK(err < 1e-2);
}

TEST_CASE("GPU: D 512 GQA 8 decoding by rule (columns over two warps, split-KV) matches the oracle") {
  TWIST_REQUIRE_GPU();
  const AttentionOptions o{.dtype = bf16, .head_dim = 512, .group = 8, .decode = true, .prefix = "g3"};
  const Case c{"D512 GQA 8 decode, 2000 keys",
               o,
               2,
               8,
               1,
               2000,
               decode_tiling({.head_dim = 512, .group = 8, .batch_kv_heads = 2, .keys = 2000})};
  const double err = gpu_error(c);
  INFO(c.name, " (", c.tiling.name(), "): relative L2 error ", err);
  CHECK(c.tiling.column_parts == 2);
  CHECK(c.tiling.split_kv > 1);
  CHECK(err < 1e-2);
}

TEST_CASE("GPU: D 256 GQA 2 prefill by rule with a sliding window matches the oracle") {
  TWIST_REQUIRE_GPU();
  const AttentionOptions o{
      .dtype = bf16, .head_dim = 256, .group = 2, .causal = true, .window = 100, .prefix = "g2"};
  const Case c = hopper(Case{"D256 GQA 2, a window of 100", o, 1, 4, 260, 260, {}});
  const double err = gpu_error(c);
  INFO(c.name, " (", c.tiling.name(), "): relative L2 error ", err);
  CHECK(err < 1e-2);
}

// One small case for the sanitizers: D 512 over two column warpgroups, rows that see no key, a ring that
// wraps.
TEST_CASE("GPU: D 512 Hopper attention with masked rows (for the sanitizers)") {
  TWIST_REQUIRE_GPU();
  const Case c = hopper(Case{"D512 GQA 8, masked rows",
                             {.dtype = bf16, .head_dim = 512, .group = 8, .causal = true, .prefix = "gs"},
                             1,
                             8,
                             100,
                             70,
                             {}});
  const double err = gpu_error(c);
  INFO(c.name, " (", c.tiling.name(), "): relative L2 error ", err);
  CHECK(c.tiling.column_parts == 2);
  CHECK(err < 1e-2);
}
