// shuffle_xor (a butterfly all-reduce within warps) and atomic_add (accumulation across blocks).
#include <doctest/doctest.h>

#include <array>

#include "backends/reference/interpreter/interpreter.h"
#include "tests/reference/interpreter/kernel_builder.h"

using namespace twist::reference;
using namespace twist::reference::testing;
namespace intrinsic = twist::intrinsic;

namespace {

constexpr int kThreads = 64;  // two warps

// out[t] = the sum of x over t's warp, by five shuffle_xor steps (masks 16, 8, 4, 2, 1), each adding the
// partner lane's partial sum.
Kernel butterfly(bool divergent) {
  std::vector<Stmt> steps = {store("r", load(f32, "x", tid()), 0)};
  for (int mask = 16; mask >= 1; mask /= 2) {
    Stmt shuffle = intrinsic::shuffle_xor({"partner", 0, load(f32, "r", 0), mask});
    if (divergent && mask == 4) shuffle = if_then(tid() % 32 < 24, shuffle);
    steps.push_back(shuffle);
    steps.push_back(store("r", load(f32, "r", 0) + load(f32, "partner", 0), 0));
  }
  steps.push_back(store("out", load(f32, "r", 0), tid()));
  Kernel k;
  k.name = "butterfly";
  k.buffers = {buffer("x", f32, {kThreads}, BufferArg::Role::input),
               buffer("out", f32, {kThreads}, BufferArg::Role::output)};
  k.grid = {1, 1, 1};
  k.threads = kThreads;
  k.body = register_array("r", f32, 1, register_array("partner", f32, 1, block(steps)));
  return k;
}

}  // namespace

TEST_CASE("a shuffle_xor butterfly leaves every lane with its warp's sum, added in butterfly order") {
  const HostTensor x = random_normal(f32, {kThreads}, 41);
  std::map<std::string, HostTensor> buffers = {{"x", x}, {"out", HostTensor(f32, {kThreads})}};
  run_kernel(butterfly(false), buffers, {});
  for (int warp = 0; warp < kThreads / 32; ++warp) {
    // The same butterfly over one warp's values in plain C++.
    std::array<float, 32> partial;
    for (int lane = 0; lane < 32; ++lane) partial[lane] = static_cast<float>(x.get({warp * 32 + lane}));
    for (int mask = 16; mask >= 1; mask /= 2) {
      std::array<float, 32> next;
      for (int lane = 0; lane < 32; ++lane) next[lane] = partial[lane] + partial[lane ^ mask];
      partial = next;
    }
    for (int lane = 0; lane < 32; ++lane)
      REQUIRE(buffers.at("out").get({warp * 32 + lane}) == static_cast<double>(partial[lane]));
  }
}

TEST_CASE("shuffle_xor with part of the warp inactive is an error") {
  std::map<std::string, HostTensor> buffers = {{"x", HostTensor(f32, {kThreads})},
                                               {"out", HostTensor(f32, {kThreads})}};
  CHECK_THROWS_WITH_AS(run_kernel(butterfly(true), buffers, {}),
                       doctest::Contains("shuffle_xor by warp 0 with lane 24 (thread 24) inactive"), Error);
}

TEST_CASE("atomic_add accumulates every thread of every block") {
  // Each of 4 blocks adds its x values into sums[t % 8] and counts them into counts[t % 8].
  const int blocks = 4, bins = 8;
  const Expr t = tid(), i = bid(0) * kThreads + tid();
  Kernel k;
  k.name = "histogram";
  k.buffers = {buffer("x", f32, {blocks * kThreads}, BufferArg::Role::input),
               buffer("sums", f32, {bins}, BufferArg::Role::output),
               buffer("counts", i32, {bins}, BufferArg::Role::output)};
  k.grid = {blocks, 1, 1};
  k.threads = kThreads;
  k.body = block({intrinsic::atomic_add({"sums", t % bins, load(f32, "x", i)}),
                  intrinsic::atomic_add({"counts", t % bins, Expr(1)})});
  const HostTensor x = random_normal(f32, {blocks * kThreads}, 42);
  std::map<std::string, HostTensor> buffers = {
      {"x", x}, {"sums", HostTensor(f32, {bins})}, {"counts", HostTensor(i32, {bins})}};
  run_kernel(k, buffers, {});
  // The interpreter serializes the additions in block and thread order; the same order in C++ floats.
  std::array<float, bins> sums{};
  for (int b = 0; b < blocks; ++b)
    for (int thread = 0; thread < kThreads; ++thread)
      sums[thread % bins] += static_cast<float>(x.get({b * kThreads + thread}));
  for (int bin = 0; bin < bins; ++bin) {
    CHECK(buffers.at("sums").get({bin}) == static_cast<double>(sums[bin]));
    CHECK(buffers.at("counts").get({bin}) == blocks * kThreads / bins);
  }

  // Only f32 and i32 global buffers have atomics.
  k.buffers[1].type = twist::f16;
  k.body = intrinsic::atomic_add({"sums", t % bins, Halide::cast(f16, load(f32, "x", i))});
  buffers["sums"] = HostTensor(f16, {bins});
  CHECK_THROWS_WITH_AS(run_kernel(k, buffers, {}),
                       doctest::Contains("atomic_add adds to f32 or i32 global buffers"), Error);
}
