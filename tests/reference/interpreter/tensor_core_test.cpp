// The warp-level matrix product m16n8k16 built from ldmatrix (x4 for A, x2.trans for B) and mma.sync, by
// two warps. This is the test that pins the fragment layouts: the kernel places C and reads D with the
// layouts of the PTX ISA's figures, the per-lane registers that ldmatrix fills are compared with those
// figures, and the product with a plain C++ one.
#include <doctest/doctest.h>

#include <array>
#include <cmath>

#include "backends/reference/interpreter/interpreter.h"
#include "lang/float_formats.h"
#include "tests/reference/interpreter/kernel_builder.h"

using namespace twist::reference;
using namespace twist::reference::testing;
namespace intrinsic = twist::intrinsic;

namespace {

constexpr int kWarps = 2, kThreads = 32 * kWarps;
constexpr int M = 16 * kWarps, N = 8, K = 16;  // warp w computes rows 16w .. 16w + 15

// The PTX ISA's fragment figures for mma.m16n8k16 with 16-bit A and B (section "Matrix Fragments for
// mma.m16n8k16 with floating point type"), written out as tables: element i of a lane's fragment lies at
// row groupID + row_offset[i], column threadID_in_group * 2 + col_offset[i], where groupID = lane / 4 and
// threadID_in_group = lane % 4 (for B the table gives the k row and groupID is the column n).
constexpr std::array<int, 8> kARowOffset = {0, 0, 8, 8, 0, 0, 8, 8};
constexpr std::array<int, 8> kAColOffset = {0, 1, 0, 1, 8, 9, 8, 9};
constexpr std::array<int, 4> kBKOffset = {0, 1, 8, 9};
constexpr std::array<int, 4> kCRowOffset = {0, 0, 8, 8};
constexpr std::array<int, 4> kCColOffset = {0, 1, 0, 1};

struct Types {
  Type input, accumulator;
};

// A (M x K) and B (K x N) are staged into shared memory row-major; each warp loads its fragments with
// ldmatrix, multiplies, and writes D and, for inspection, its A and B registers (a_regs[thread][8],
// b_regs[thread][4]).
Kernel mma_kernel(const Types &types, bool ldmatrix_in_divergent_branch = false) {
  const Expr t = tid(), lane = tid() % 32, warp = tid() / 32, g = lane / 4, tig = lane % 4;
  const Expr e = i32_var("e");
  std::vector<Stmt> body;
  // Staging: A by synchronous 16-byte copies (8 elements per thread), B by plain stores.
  body.push_back(intrinsic::copy({"As", t * 8, "A", t * 8, 16, 16, false}));
  body.push_back(
      if_then(t < K * N / 8, unrolled("e", 8, store("Bs", load(types.input, "B", t * 8 + e), t * 8 + e))));
  body.push_back(intrinsic::barrier());
  // ldmatrix.x4 for A: lanes 0-15 give rows 0-15 of the warp's A at column 0, lanes 16-31 the same rows at
  // column 8, so the four matrices are A's quadrants (top-left, bottom-left, top-right, bottom-right).
  Stmt load_a = intrinsic::matrix_move(
      {intrinsic::MatrixMove::Direction::load, "a", 0, "As", (warp * 16 + lane % 16) * K + (lane / 16) * 8});
  if (ldmatrix_in_divergent_branch) load_a = if_then(lane < 16, load_a);
  body.push_back(load_a);
  // ldmatrix.x2.trans for B: lanes 0-15 give rows k = 0-15 of B (8 elements each); matrix 0 is k 0-7,
  // matrix 1 is k 8-15, and the transpose hands each lane a column n of them.
  body.push_back(intrinsic::matrix_move(
      {intrinsic::MatrixMove::Direction::load, "b", 0, "Bs", (lane % 16) * N, 2, true}));
  for (int i = 0; i < 4; ++i)
    body.push_back(store(
        "c", load(types.accumulator, "C", (warp * 16 + g + kCRowOffset[i]) * N + tig * 2 + kCColOffset[i]),
        i));
  body.push_back(intrinsic::mma({"d", "a", "b", "c", 0, 0, 0, 0}));
  for (int i = 0; i < 4; ++i)
    body.push_back(store("D", load(types.accumulator, "d", i),
                         (warp * 16 + g + kCRowOffset[i]) * N + tig * 2 + kCColOffset[i]));
  body.push_back(unrolled("e", 8, store("a_regs", load(types.input, "a", e), t * 8 + e)));
  body.push_back(unrolled("e", 4, store("b_regs", load(types.input, "b", e), t * 4 + e)));

  Stmt s = block(body);
  s = register_array("d", types.accumulator, 4, s);
  s = register_array("c", types.accumulator, 4, s);
  s = register_array("b", types.input, 4, s);
  s = register_array("a", types.input, 8, s);
  s = shared_array("Bs", types.input, K * N, s);
  s = shared_array("As", types.input, M * K, s);
  Kernel k;
  k.name = "mma_m16n8k16";
  k.buffers = {buffer("A", types.input, {M, K}, BufferArg::Role::input),
               buffer("B", types.input, {K, N}, BufferArg::Role::input),
               buffer("C", types.accumulator, {M, N}, BufferArg::Role::input),
               buffer("D", types.accumulator, {M, N}, BufferArg::Role::output),
               buffer("a_regs", types.input, {kThreads, 8}, BufferArg::Role::output),
               buffer("b_regs", types.input, {kThreads, 4}, BufferArg::Role::output)};
  k.grid = {1, 1, 1};
  k.threads = kThreads;
  k.shared_bytes = (M * K + K * N) * 2;
  k.body = s;
  return k;
}

// Multiples of 1/8 in [-4, 4] (and of 1/16 for C): every product and sum of them is exact in double, so
// the only rounding of the product is the one rounding of D to its type.
HostTensor dyadic(const Type &type, std::vector<int64_t> shape, uint64_t seed, double step) {
  HostTensor t = random_uniform(twist::i32, shape, seed, -32, 32);
  HostTensor out(type, shape);
  for (int64_t i = 0; i < t.size(); ++i) out.set_linear(i, t.get_linear(i) * step);
  return out;
}

std::map<std::string, HostTensor> run(const Types &types, const HostTensor &A, const HostTensor &B,
                                      const HostTensor &C) {
  LoweredProgram p;
  p.name = "mma";
  p.kernels = {mma_kernel(types)};
  p.outputs = {p.kernels[0].buffers[3], p.kernels[0].buffers[4], p.kernels[0].buffers[5]};
  return run_program(p, {{"A", A}, {"B", B}, {"C", C}}, {});
}

void check_fragments(const std::map<std::string, HostTensor> &out, const HostTensor &A, const HostTensor &B) {
  for (int thread = 0; thread < kThreads; ++thread) {
    const int warp = thread / 32, lane = thread % 32, group = lane / 4, in_group = lane % 4;
    for (int i = 0; i < 8; ++i) {
      INFO("thread " << thread << ", a" << i);
      REQUIRE(out.at("a_regs").get({thread, i}) ==
              A.get({warp * 16 + group + kARowOffset[i], in_group * 2 + kAColOffset[i]}));
    }
    for (int i = 0; i < 4; ++i) {
      INFO("thread " << thread << ", b" << i);
      REQUIRE(out.at("b_regs").get({thread, i}) == B.get({in_group * 2 + kBKOffset[i], group}));
    }
  }
}

void check_product(const HostTensor &D, const HostTensor &A, const HostTensor &B, const HostTensor &C,
                   const Type &accumulator) {
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t c = 0; c < N; ++c) {
      long double sum = C.get({r, c});
      for (int64_t k = 0; k < K; ++k) sum += static_cast<long double>(A.get({r, k})) * B.get({k, c});
      INFO("D[" << r << ", " << c << "]");
      REQUIRE(D.get({r, c}) == twist::round_to_type(accumulator, static_cast<double>(sum)));
    }
  }
}

}  // namespace

TEST_CASE("ldmatrix and mma.sync m16n8k16 follow the PTX fragment layouts") {
  for (const Types types : {Types{f16, f32}, Types{f16, f16}, Types{bf16, f32}}) {
    INFO("inputs " << twist::type_name(types.input) << ", accumulator "
                   << twist::type_name(types.accumulator));
    const HostTensor A = dyadic(types.input, {M, K}, 31, 0.125), B = dyadic(types.input, {K, N}, 32, 0.125),
                     C = dyadic(types.accumulator, {M, N}, 33, 0.0625);
    const auto out = run(types, A, B, C);
    check_fragments(out, A, B);
    check_product(out.at("D"), A, B, C, types.accumulator);
  }
}

TEST_CASE("f16 accumulation rounds D to f16 once per instruction") {
  // Sums up to 16 * 16 = 256 need more than f16's 11 significant bits at a resolution of 1/64: D must be the
  // exact sum rounded once, which check_product compares exactly.
  const Types types{f16, f16};
  const HostTensor A = dyadic(f16, {M, K}, 34, 0.125), B = dyadic(f16, {K, N}, 35, 0.125),
                   C = dyadic(f16, {M, N}, 36, 0.0625);
  const auto out = run(types, A, B, C);
  int rounded = 0;
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) {
      double exact = C.get({r, c});
      for (int64_t k = 0; k < K; ++k) exact += A.get({r, k}) * B.get({k, c});
      rounded += out.at("D").get({r, c}) != exact;
    }
  CHECK(rounded > 0);  // the inputs do exercise the rounding
  check_product(out.at("D"), A, B, C, f16);
}

TEST_CASE("the product of normally distributed f16 matrices matches a double one within f32 rounding") {
  const Types types{f16, f32};
  const HostTensor A = random_normal(f16, {M, K}, 37), B = random_normal(f16, {K, N}, 38),
                   C = random_normal(f32, {M, N}, 39);
  const auto out = run(types, A, B, C);
  for (int64_t r = 0; r < M; ++r)
    for (int64_t c = 0; c < N; ++c) {
      long double sum = C.get({r, c});
      for (int64_t k = 0; k < K; ++k) sum += static_cast<long double>(A.get({r, k})) * B.get({k, c});
      const double got = out.at("D").get({r, c});
      REQUIRE(std::abs(got - static_cast<double>(sum)) <=
              std::abs(static_cast<double>(sum)) * 0x1p-23 + 0x1p-40);
    }
}

TEST_CASE("ldmatrix with part of the warp inactive is an error") {
  const Types types{f16, f32};
  std::map<std::string, HostTensor> buffers = {{"A", HostTensor(f16, {M, K})},
                                               {"B", HostTensor(f16, {K, N})},
                                               {"C", HostTensor(f32, {M, N})},
                                               {"D", HostTensor(f32, {M, N})},
                                               {"a_regs", HostTensor(f16, {kThreads, 8})},
                                               {"b_regs", HostTensor(f16, {kThreads, 4})}};
  CHECK_THROWS_WITH_AS(run_kernel(mma_kernel(types, true), buffers, {}),
                       doctest::Contains("ldmatrix by warp 0 with lane 16 (thread 16) inactive"), Error);
}
