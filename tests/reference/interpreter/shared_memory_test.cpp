// Block-level cooperation through shared memory: a tree reduction with barriers, and the race and
// divergence errors its broken variants must raise.
#include <doctest/doctest.h>

#include <cmath>

#include "backends/reference/interpreter/interpreter.h"
#include "tests/reference/interpreter/kernel_builder.h"

using namespace twist::reference;
using namespace twist::reference::testing;

namespace {

constexpr int kThreads = 256;

Kernel single_block_kernel(const std::string &name, std::vector<BufferArg> buffers, int blocks, Stmt body) {
  Kernel k;
  k.name = name;
  k.buffers = std::move(buffers);
  k.grid = {blocks, 1, 1};
  k.threads = kThreads;
  k.shared_bytes = kThreads * 4;
  k.body = std::move(body);
  return k;
}

// Each block sums its 256 elements of x into out[block]: s[t] = x[...]; then for stride 128, 64, ..., 1,
// the lower half adds the upper half. `skip_barrier_after` names the stride step (0 for the initial store)
// whose barrier is left out, or -1.
Kernel block_sum(int blocks, int skip_barrier_after = -1) {
  const Expr t = tid();
  std::vector<Stmt> steps = {store("s", load(f32, "x", bid(0) * kThreads + t), t)};
  if (skip_barrier_after != 0) steps.push_back(twist::intrinsic::barrier());
  for (int stride = kThreads / 2; stride >= 1; stride /= 2) {
    steps.push_back(if_then(t < stride, store("s", load(f32, "s", t) + load(f32, "s", t + stride), t)));
    if (skip_barrier_after != stride) steps.push_back(twist::intrinsic::barrier());
  }
  steps.push_back(if_then(t == 0, store("out", load(f32, "s", 0), bid(0))));
  return single_block_kernel("block_sum",
                             {buffer("x", f32, {blocks * kThreads}, BufferArg::Role::input),
                              buffer("out", f32, {blocks}, BufferArg::Role::output)},
                             blocks, shared_array("s", f32, kThreads, block(steps)));
}

// The same tree in plain C++ floats.
float tree_sum(const HostTensor &x, int64_t first) {
  std::vector<float> s(kThreads);
  for (int t = 0; t < kThreads; ++t) s[t] = static_cast<float>(x.get({first + t}));
  for (int stride = kThreads / 2; stride >= 1; stride /= 2)
    for (int t = 0; t < stride; ++t) s[t] = s[t] + s[t + stride];
  return s[0];
}

std::string error_of(const Kernel &k, std::map<std::string, HostTensor> &buffers,
                     const InterpretOptions &options = {}) {
  try {
    run_kernel(k, buffers, {}, options);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a block reduction through shared memory with barriers sums each block in tree order") {
  const int blocks = 3;
  const HostTensor x = random_normal(f32, {blocks * kThreads}, 11);
  std::map<std::string, HostTensor> buffers = {{"x", x}, {"out", HostTensor(f32, {blocks})}};
  run_kernel(block_sum(blocks), buffers, {});
  for (int b = 0; b < blocks; ++b)
    CHECK(buffers.at("out").get({b}) == static_cast<double>(tree_sum(x, int64_t{b} * kThreads)));
}

TEST_CASE("the block reduction with a barrier removed is reported as a race") {
  const int blocks = 2;
  std::map<std::string, HostTensor> buffers = {{"x", random_normal(f32, {blocks * kThreads}, 12)},
                                               {"out", HostTensor(f32, {blocks})}};
  SUBCASE("after the initial store") {
    // Thread 0 adds s[128], which thread 128 stored with no barrier in between.
    const std::string message = error_of(block_sum(blocks, 0), buffers);
    INFO(message);
    CHECK(message.find("race on s[128]: thread 0 reads it after thread 128 wrote it") != std::string::npos);
    CHECK(message.find("block (0, 0, 0)") != std::string::npos);
    CHECK(message.find("at `s[threadIdx.x] = ") != std::string::npos);
  }
  SUBCASE("after the stride-128 step") {
    const std::string message = error_of(block_sum(blocks, 128), buffers);
    INFO(message);
    CHECK(message.find("race on s[64]: thread 0 reads it after thread 64 wrote it") != std::string::npos);
  }
  SUBCASE("race checks can be turned off") {
    InterpretOptions unchecked;
    unchecked.check_races = false;
    CHECK(error_of(block_sum(blocks, 128), buffers, unchecked).empty());
  }
}

TEST_CASE("a write after another thread's read with no barrier between is a race") {
  // Every thread reads its right neighbour's element, then overwrites its own.
  const Expr t = tid();
  const Stmt body = shared_array(
      "s", f32, kThreads,
      block({store("s", Halide::cast(f32, t), t), twist::intrinsic::barrier(),
             register_array(
                 "r", f32, 1,
                 block({store("r", load(f32, "s", (t + 1) % kThreads), 0), store("s", load(f32, "r", 0), t),
                        twist::intrinsic::barrier(), store("out", load(f32, "s", t), t)}))}));
  std::map<std::string, HostTensor> buffers = {{"out", HostTensor(f32, {kThreads})}};
  const Kernel k =
      single_block_kernel("shift", {buffer("out", f32, {kThreads}, BufferArg::Role::output)}, 1, body);
  const std::string message = error_of(k, buffers);
  INFO(message);
  CHECK(message.find("race on s[0]: thread 0 writes it after thread 255 read it") != std::string::npos);
}

TEST_CASE("reading shared memory that nobody wrote gives poison, not zero") {
  const Expr t = tid();
  const Stmt body = shared_array("s", f32, kThreads, store("out", load(f32, "s", t), t));
  std::map<std::string, HostTensor> buffers = {{"out", HostTensor(f32, {kThreads})}};
  run_kernel(
      single_block_kernel("unwritten", {buffer("out", f32, {kThreads}, BufferArg::Role::output)}, 1, body),
      buffers, {});
  for (int i = 0; i < kThreads; ++i) REQUIRE(std::isnan(buffers.at("out").get({i})));
}

TEST_CASE("a barrier under a divergent branch is an error") {
  const Stmt body =
      shared_array("s", f32, kThreads,
                   block({store("s", 1.0f, tid()), if_then(tid() < 96, twist::intrinsic::barrier()),
                          store("out", 2.0f, tid())}));
  std::map<std::string, HostTensor> buffers = {{"out", HostTensor(f32, {kThreads})}};
  const Kernel k =
      single_block_kernel("divergent", {buffer("out", f32, {kThreads}, BufferArg::Role::output)}, 1, body);
  const std::string message = error_of(k, buffers);
  INFO(message);
  CHECK(message.find("barrier reached by 96 of the block's 256 threads (thread 96 is not among them)") !=
        std::string::npos);
}

TEST_CASE("loop bounds that differ between threads are refused") {
  const Stmt body = serial("i", 0, tid() % 3, store("out", Halide::cast(f32, i32_var("i")), tid()));
  std::map<std::string, HostTensor> buffers = {{"out", HostTensor(f32, {kThreads})}};
  const Kernel k =
      single_block_kernel("ragged", {buffer("out", f32, {kThreads}, BufferArg::Role::output)}, 1, body);
  const std::string message = error_of(k, buffers);
  INFO(message);
  CHECK(
      message.find("divergent loop bounds are not supported: thread 0 runs the loop from 0 for 0 iterations, "
                   "thread 1 from 0 for 1") != std::string::npos);
}

TEST_CASE("shared allocations larger than the kernel declares are refused") {
  Kernel k = block_sum(1);
  k.shared_bytes = 512;
  std::map<std::string, HostTensor> buffers = {{"x", HostTensor(f32, {kThreads})},
                                               {"out", HostTensor(f32, {1})}};
  CHECK(error_of(k, buffers).find("take 1024 bytes, but the kernel declares only 512") != std::string::npos);
}
