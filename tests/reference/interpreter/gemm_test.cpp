// A whole tensor-core GEMM kernel as a lowering would produce it: 64 x 64 block tiles, K in steps of 16
// staged through a two-stage cp.async pipeline, eight warps each computing 32 x 16 with ldmatrix and
// mma.sync, f32 accumulators in registers. It checks the pieces together, and that the interpreter is fast
// enough for kernels of this size (the time is printed, not asserted).
#include <doctest/doctest.h>

#include <chrono>

#include "backends/reference/interpreter/interpreter.h"
#include "tests/reference/interpreter/kernel_builder.h"

using namespace twist::reference;
using namespace twist::reference::testing;
namespace intrinsic = twist::intrinsic;

namespace {

constexpr int M = 128, N = 128, K = 64;
constexpr int BM = 64, BN = 64, BK = 16, kThreads = 256;
constexpr int kATile = BM * BK, kBTile = BK * BN;

Kernel gemm() {
  const Expr t = tid(), lane = t % 32, warp = t / 32, warp_m = warp / 4, warp_n = warp % 4;
  const Expr g = lane / 4, tig = lane % 4, bm = bid(1), bn = bid(0);
  const Expr kt = i32_var("kt"), mi = i32_var("mi"), ni = i32_var("ni"), i = i32_var("i");

  // Threads 0-127 copy the A tile (64 rows of 16: two 16-byte chunks a row), threads 128-255 the B tile
  // (16 rows of 64: eight chunks a row).
  auto copy_tiles = [&](const Expr &k_tile) {
    const Expr u = t % 128, stage = k_tile % 2;
    const Stmt copy_a = intrinsic::copy({"As", stage * kATile + (u / 2) * BK + (u % 2) * 8, "A",
                                         (bm * BM + u / 2) * K + k_tile * BK + (u % 2) * 8, 16, 16, true});
    const Stmt copy_b = intrinsic::copy({"Bs", stage * kBTile + (u / 8) * BN + (u % 8) * 8, "B",
                                         (k_tile * BK + u / 8) * N + bn * BN + (u % 8) * 8, 16, 16, true});
    return if_then(t < 128, copy_a, copy_b);
  };

  const Expr stage = kt % 2, tile = (mi * 2 + ni) * 4;
  const Stmt k_step = block({
      if_then(kt + 1 < K / BK, copy_tiles(kt + 1)),
      intrinsic::async_commit(),
      intrinsic::async_wait(1),
      intrinsic::barrier(),
      unrolled("mi", 2,
               intrinsic::matrix_move(
                   {intrinsic::MatrixMove::Direction::load, "a", mi * 8, "As",
                    stage * kATile + (warp_m * 32 + mi * 16 + lane % 16) * BK + (lane / 16) * 8})),
      unrolled("ni", 2,
               intrinsic::matrix_move({intrinsic::MatrixMove::Direction::load, "b", ni * 4, "Bs",
                                       stage * kBTile + (lane % 16) * BN + warp_n * 16 + ni * 8, 2, true})),
      unrolled("mi", 2,
               unrolled("ni", 2, intrinsic::mma({"acc", "a", "b", "acc", tile, mi * 8, ni * 4, tile}))),
      intrinsic::barrier(),
  });
  const Expr row = bm * BM + warp_m * 32 + mi * 16 + g + 8 * (i / 2);
  const Expr col = bn * BN + warp_n * 16 + ni * 8 + 2 * tig + i % 2;
  const Stmt body = block({
      unrolled("i", 16, store("acc", 0.0f, i)),
      copy_tiles(0),
      intrinsic::async_commit(),
      serial("kt", 0, K / BK, k_step),
      unrolled("mi", 2,
               unrolled("ni", 2, unrolled("i", 4, store("C", load(f32, "acc", tile + i), row * N + col)))),
  });
  Kernel k;
  k.name = "gemm_64x64x16";
  k.buffers = {buffer("A", f16, {M, K}, BufferArg::Role::input),
               buffer("B", f16, {K, N}, BufferArg::Role::input),
               buffer("C", f32, {M, N}, BufferArg::Role::output)};
  k.grid = {N / BN, M / BM, 1};
  k.threads = kThreads;
  k.shared_bytes = 2 * (kATile + kBTile) * 2;
  k.body = shared_array(
      "As", f16, 2 * kATile,
      shared_array(
          "Bs", f16, 2 * kBTile,
          register_array("acc", f32, 16, register_array("a", f16, 16, register_array("b", f16, 8, body)))));
  return k;
}

}  // namespace

TEST_CASE("a pipelined tensor-core GEMM computes A * B with f32 accumulation per mma") {
  const HostTensor A = random_normal(f16, {M, K}, 51), B = random_normal(f16, {K, N}, 52);
  LoweredProgram p;
  p.name = "gemm";
  p.kernels = {gemm()};
  p.inputs = {p.kernels[0].buffers[0], p.kernels[0].buffers[1]};
  p.outputs = {p.kernels[0].buffers[2]};
  const auto start = std::chrono::steady_clock::now();
  const HostTensor C = run_program(p, {{"A", A}, {"B", B}}, {}).at("C");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("interpreting the " << M << "x" << N << "x" << K << " GEMM took " << seconds << " s");

  // Each mma adds its 16 products to the accumulator in double and rounds to f32 once: the same sums, in
  // the same order, in plain C++.
  HostTensor want(f32, {M, N}), exact(f32, {M, N});
  for (int64_t r = 0; r < M; ++r) {
    for (int64_t c = 0; c < N; ++c) {
      float acc = 0;
      double full = 0;
      for (int64_t k0 = 0; k0 < K; k0 += 16) {
        double sum = acc;
        for (int64_t k = k0; k < k0 + 16; ++k) sum += A.get({r, k}) * B.get({k, c});
        acc = static_cast<float>(sum);
      }
      for (int64_t k = 0; k < K; ++k) full += A.get({r, k}) * B.get({k, c});
      want.set({r, c}, acc);
      exact.set({r, c}, full);
    }
  }
  CHECK(max_abs_error(C, want) == 0);
  CHECK(relative_l2_error(C, exact) < 1e-6);
}
