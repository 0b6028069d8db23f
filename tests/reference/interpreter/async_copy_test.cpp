// Copies into shared memory: a double-buffered cp.async pipeline, the zero-fill at a tensor's edge, and the
// errors of missing waits and barriers, misaligned addresses and out-of-bounds reads.
#include <doctest/doctest.h>

#include "backends/reference/interpreter/interpreter.h"
#include "tests/reference/interpreter/kernel_builder.h"

using namespace twist::reference;
using namespace twist::reference::testing;
namespace intrinsic = twist::intrinsic;

namespace {

constexpr int kThreads = 32;
constexpr int kTile = kThreads * 8;  // each thread copies 16 bytes: 8 f16 elements

struct Pipeline {
  int wait_pending = 1;            // the async_wait before a tile is used
  bool barrier_after_wait = true;  // makes every thread's copies visible to the others
  bool barrier_after_use = true;   // keeps the next copy into a stage from overwriting it while it is read
  bool commit = true;
};

// out[i][t][j] = 2 * x[i][(t + 1) % 32][j] for `tiles` tiles of 32 x 8 f16, staged through two shared
// buffers: tile i + 1 is copied while tile i is used, and each thread uses its neighbour's copy.
Kernel pipeline(int tiles, const Pipeline &p) {
  const Expr t = tid(), i = i32_var("i"), j = i32_var("j");
  auto copy_tile = [&](const Expr &tile) {
    return intrinsic::copy({"buf", (tile % 2) * kTile + t * 8, "x", tile * kTile + t * 8, 16, 16, true});
  };
  std::vector<Stmt> prologue = {copy_tile(0)};
  if (p.commit) prologue.push_back(intrinsic::async_commit());
  std::vector<Stmt> iteration = {if_then(i + 1 < tiles, copy_tile(i + 1))};
  if (p.commit) iteration.push_back(intrinsic::async_commit());
  iteration.push_back(intrinsic::async_wait(p.wait_pending));
  if (p.barrier_after_wait) iteration.push_back(intrinsic::barrier());
  const Expr neighbour = (i % 2) * kTile + ((t + 1) % kThreads) * 8 + j;
  iteration.push_back(unrolled(
      "j", 8, store("out", load(f16, "buf", neighbour) * Halide::cast(f16, 2), i * kTile + t * 8 + j)));
  if (p.barrier_after_use) iteration.push_back(intrinsic::barrier());
  prologue.push_back(serial("i", 0, tiles, block(iteration)));
  Kernel k;
  k.name = "pipeline";
  k.buffers = {buffer("x", f16, {tiles * kTile}, BufferArg::Role::input),
               buffer("out", f16, {tiles * kTile}, BufferArg::Role::output)};
  k.grid = {1, 1, 1};
  k.threads = kThreads;
  k.shared_bytes = 2 * kTile * 2;
  k.body = shared_array("buf", f16, 2 * kTile, block(prologue));
  return k;
}

std::string error_of(const Kernel &k, std::map<std::string, HostTensor> &buffers) {
  try {
    run_kernel(k, buffers, {});
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

std::map<std::string, HostTensor> pipeline_buffers(int tiles) {
  return {{"x", random_normal(f16, {tiles * kTile}, 21)}, {"out", HostTensor(f16, {tiles * kTile})}};
}

// A single-block kernel that copies x into shared memory with one `copy` per thread, then writes the
// shared array to `out`.
Kernel stage_and_store(int x_size, const intrinsic::Copy &copy) {
  Kernel k;
  k.name = "stage";
  k.buffers = {buffer("x", f16, {x_size}, BufferArg::Role::input),
               buffer("out", f16, {kTile}, BufferArg::Role::output)};
  k.grid = {1, 1, 1};
  k.threads = kThreads;
  k.shared_bytes = kTile * 2;
  const Expr t = tid(), j = i32_var("j");
  k.body = shared_array(
      "buf", f16, kTile,
      block({intrinsic::copy(copy), intrinsic::async_commit(), intrinsic::async_wait(0), intrinsic::barrier(),
             unrolled("j", 8, store("out", load(f16, "buf", t * 8 + j), t * 8 + j))}));
  return k;
}

}  // namespace

TEST_CASE("a double-buffered cp.async pipeline delivers every tile") {
  const int tiles = 5;
  auto buffers = pipeline_buffers(tiles);
  run_kernel(pipeline(tiles, {}), buffers, {});
  const HostTensor &x = buffers.at("x"), &out = buffers.at("out");
  for (int i = 0; i < tiles; ++i)
    for (int t = 0; t < kThreads; ++t)
      for (int j = 0; j < 8; ++j)
        REQUIRE(out.get({i * kTile + t * 8 + j}) == 2 * x.get({i * kTile + ((t + 1) % kThreads) * 8 + j}));
}

TEST_CASE("reading a tile whose copy is still in flight is reported") {
  auto buffers = pipeline_buffers(3);
  SUBCASE("a wait that leaves the tile's group pending") {
    // async_wait(2) with two groups committed completes neither: tile 0 is read in flight.
    const std::string message = error_of(pipeline(3, {.wait_pending = 2}), buffers);
    INFO(message);
    CHECK(message.find("read of buf[8] by thread 0 while a cp.async into it (issued by thread 1 at "
                       "`twist.copy(") != std::string::npos);
    CHECK(message.find("is in flight: missing async_wait/barrier") != std::string::npos);
  }
  SUBCASE("copies never committed are not completed by a wait") {
    const std::string message = error_of(pipeline(3, {.commit = false}), buffers);
    INFO(message);
    CHECK(message.find("while a cp.async into it") != std::string::npos);
  }
}

TEST_CASE("a pipeline missing one of its barriers is reported as a race") {
  auto buffers = pipeline_buffers(3);
  SUBCASE("between the wait and the use: another thread's copy is not yet visible") {
    const std::string message = error_of(pipeline(3, {.barrier_after_wait = false}), buffers);
    INFO(message);
    CHECK(message.find("race on buf[8]: thread 0 reads it after thread 1 wrote it at `twist.copy(") !=
          std::string::npos);
  }
  SUBCASE("between the use and the next copy into the same stage") {
    // In iteration 1, thread 0 issues the copy of tile 2 into stage 0, which thread 31 read in iteration 0
    // with no barrier since.
    const std::string message = error_of(pipeline(3, {.barrier_after_use = false}), buffers);
    INFO(message);
    CHECK(message.find("race on buf[0]: thread 0 writes it after thread 31 read it") != std::string::npos);
  }
}

TEST_CASE("a copy at a tensor's edge reads only src_bytes and zero-fills the rest") {
  // x has 236 elements: thread 29 covers 232..239 and reads 4 of them; threads 30 and 31 start past the end
  // and read nothing, so their source addresses are never dereferenced.
  const int n = 236;
  const Expr t = tid();
  const Expr src_bytes = Halide::clamp((n - t * 8) * 2, 0, 16);
  const Kernel k = stage_and_store(n, {"buf", t * 8, "x", t * 8, 16, src_bytes, true});
  std::map<std::string, HostTensor> buffers = {{"x", random_normal(f16, {n}, 22)},
                                               {"out", HostTensor(f16, {kTile})}};
  run_kernel(k, buffers, {});
  for (int e = 0; e < kTile; ++e)
    REQUIRE(buffers.at("out").get({e}) == (e < n ? buffers.at("x").get({e}) : 0.0));
}

TEST_CASE("a copy that reads past the tensor, or is misaligned, is an error") {
  const int n = 236;
  const Expr t = tid();
  std::map<std::string, HostTensor> buffers = {{"x", HostTensor(f16, {n})},
                                               {"out", HostTensor(f16, {kTile})}};
  SUBCASE("reading all 16 bytes at the edge") {
    const std::string message =
        error_of(stage_and_store(n, {"buf", t * 8, "x", t * 8, 16, 16, true}), buffers);
    INFO(message);
    CHECK(message.find("thread 29") != std::string::npos);
    CHECK(message.find("copy from x[236] is out of bounds") != std::string::npos);
  }
  SUBCASE("a destination that is not 16-byte aligned") {
    const std::string message =
        error_of(stage_and_store(n, {"buf", t * 8 + 4, "x", t * 8, 16, 0, true}), buffers);
    INFO(message);
    CHECK(message.find("the 16-byte copy into buf[4] is not 16-byte aligned (its byte offset in buf is 8)") !=
          std::string::npos);
  }
  SUBCASE("a synchronous copy is checked the same way") {
    const std::string message =
        error_of(stage_and_store(n, {"buf", t * 8, "x", t * 8 + 2, 8, 8, false}), buffers);
    INFO(message);
    CHECK(message.find("the 8-byte copy from x[2] is not 8-byte aligned") != std::string::npos);
  }
}
