// The GEMM schedule by rule (apps/gemm/gemm_rule.h): the properties its documentation promises over a sweep
// of odd and skinny shapes, and its tilings lowered and run on the interpreter against the oracle.
#include <doctest/doctest.h>

#include "apps/gemm/gemm_rule.h"
#include "lang/error.h"
#include "scheduler/lower.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using namespace twist::apps;
using twist::testing::compile_for_both_targets;
using twist::testing::lowered_error;
using twist::testing::random_inputs;

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

}  // namespace

TEST_CASE("the rule's tilings keep its promises over odd and skinny shapes") {
  const GemmMachine h200;
  int split = 0, skinny = 0;
  for (int64_t m : {1, 7, 16, 33, 64, 65, 100, 1000, 4096, 12345})
    for (int64_t n : {1, 24, 777, 4096, 11008})
      for (int64_t k : {1, 40, 4096, 16384}) {
        const GemmShape shape{m, n, k};
        const GemmTiling t = gemm_tiling_by_rule(shape, h200);
        CAPTURE(m);
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(t.name());
        CHECK(t.block_m % t.warp_m == 0);
        CHECK(t.block_n % t.warp_n == 0);
        CHECK(t.block_m == (m <= 64 ? 64 : 128));  // rule 1: skinny shapes take the small block
        const int64_t tiles = ceil_div(m, t.block_m) * ceil_div(n, t.block_n);
        if (t.block_n == 256)
          CHECK(tiles >= h200.sm_count);  // rule 2: the wide block only where it fills the SMs
        CHECK(t.split_k >= 1);
        CHECK(t.split_k <= 16);
        if (t.split_k > 1) {  // rule 3: split only where it pays
          ++split;
          skinny += m <= 64;
          CHECK(tiles < 4 * h200.sm_count);
          CHECK(ceil_div(k, t.block_k) >= 4 * t.split_k);
          CHECK(8 * m * n * t.split_k * 8 <= 2 * n * k);
        }
      }
  CHECK(skinny > 0);
  CHECK(split > skinny);  // deep-K shapes with few tiles split too, where their partials are cheap
}

TEST_CASE(
    "skinny decode shapes split K to fill the machine; large square shapes take the wide block unsplit") {
  const GemmMachine h200;
  const GemmTiling m1 =
      gemm_tiling_by_rule({1, 4096, 4096});  // 64 tiles: 8 or more slices fill 4 blocks per SM
  CHECK(m1.block_m == 64);
  CHECK(64 * m1.split_k >= 4 * h200.sm_count);
  const GemmTiling m16 = gemm_tiling_by_rule({16, 15360, 3840});
  CHECK(m16.block_m == 64);
  CHECK(240 * m16.split_k >= 4 * h200.sm_count);
  const GemmTiling square = gemm_tiling_by_rule({4096, 4096, 4096});
  CHECK(square.block_n == 256);
  CHECK(square.split_k == 1);
  const GemmTiling small = gemm_tiling_by_rule({1024, 1024, 1024});  // 32 wide tiles cannot fill 132 SMs
  CHECK(small.block_n == 128);
  CHECK(small.split_k == 1);  // its partials would cost more than its idle SMs
  // Split-K fills the blocks an SM holds: two of 128x128x64 (96 KB of stages) in sm_90a's 227 KB, one in
  // sm_80's 163 KB. One tile on 4 SMs: 8 slices against 4.
  CHECK(gemm_tiling_by_rule({128, 128, 65536}, {Target::sm90a(), 4}).split_k == 8);
  CHECK(gemm_tiling_by_rule({128, 128, 65536}, {Target::sm80(), 4}).split_k == 4);
}

TEST_CASE("the rule refuses empty shapes and input types without a tensor-core schedule, saying what to do") {
  CHECK_THROWS_WITH_AS(gemm_tiling_by_rule({0, 16, 16}),
                       doctest::Contains("the shape 0x16x16 (batch 1) is empty"), Error);
  CHECK_THROWS_WITH_AS(
      gemm_tiling_by_rule({16, 16, 16, 1, f32}),
      doctest::Contains("f32 inputs have no tensor-core schedule; use f16 or bf16, or schedule_simt"), Error);
}

TEST_CASE("the rule's tilings lower and match the oracle on the interpreter at small odd shapes") {
  // A machine of 2 SMs, so that small shapes reach every branch of the rule: the skinny block with and
  // without split-K, the square block, and the wide block once its tiles fill the SMs.
  const GemmMachine tiny{Target::sm90a(), 2};
  struct Case {
    GemmShape shape;
    int block_m, block_n, split_k;
  };
  for (const Case &c : {Case{{1, 72, 1000}, 64, 64, 4}, Case{{16, 100, 2048, 1, bf16}, 64, 64, 4},
                        Case{{33, 64, 200}, 64, 64, 1}, Case{{70, 100, 200}, 128, 128, 1},
                        Case{{130, 257, 72}, 128, 256, 1}}) {
    const GemmTiling t = gemm_tiling_by_rule(c.shape, tiny);
    INFO(c.shape.m, "x", c.shape.n, "x", c.shape.k, " ", t.name());
    CHECK(t.block_m == c.block_m);
    CHECK(t.block_n == c.block_n);
    CHECK(t.split_k == c.split_k);
    Gemm g = make_gemm({.input = c.shape.input, .output = f32});
    const Schedule s = schedule_tensor_core(g, t);
    const std::map<std::string, double> scalars = {
        {g.M.name(), c.shape.m}, {g.N.name(), c.shape.n}, {g.K.name(), c.shape.k}};
    // f32 accumulation of exact products: only the order of the sums differs from the oracle.
    CHECK(lowered_error(g.out, s, random_inputs(g.out, scalars, 11), scalars) < 1e-5);
  }
}

TEST_CASE("the rule's skinny split-K tiling compiles for sm_80 and sm_90a") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  const GemmTiling t = gemm_tiling_by_rule({1, 4096, 4096});
  REQUIRE(t.split_k > 1);
  CHECK(compile_for_both_targets(lower(g.out, schedule_tensor_core(g, t), Target::sm90a())).size() >= 2);
}
