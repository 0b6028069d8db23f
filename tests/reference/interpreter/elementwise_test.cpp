// Per-thread kernels over multi-block grids: indexing by block and thread, tail guards, poisoned outputs,
// and the errors of out-of-bounds and ill-typed accesses.
#include <doctest/doctest.h>

#include <cmath>

#include "backends/reference/interpreter/interpreter.h"
#include "lang/error.h"
#include "tests/reference/interpreter/kernel_builder.h"

using namespace twist::reference;
using namespace twist::reference::testing;

namespace {

constexpr int kThreads = 128;

// out[r, c] = f32(x[r, c]) * scale + bias[c], one thread per element: blockIdx.y is the row, blockIdx.x and
// threadIdx.x the column; columns past `cols` are cut by the guard.
Kernel scale_and_bias(bool guard_tail, Expr column_blocks) {
  const Expr rows = i32_var("rows"), cols = i32_var("cols"),
             scale = Halide::Internal::Variable::make(f32, "scale");
  const Expr c = i32_var("c"), r = bid(1);
  const Expr value = Halide::cast(f32, load(f16, "x", r * cols + c)) * scale + load(f32, "bias", c);
  Stmt body = store("out", value, r * cols + c);
  if (guard_tail) body = if_then(c < cols, body);
  body = let("c", bid(0) * kThreads + tid(), body);
  Kernel k;
  k.name = "scale_and_bias";
  k.buffers = {buffer("x", f16, {rows, cols}, BufferArg::Role::input),
               buffer("bias", f32, {cols}, BufferArg::Role::input),
               buffer("out", f32, {rows, cols}, BufferArg::Role::output)};
  k.scalars = {{"rows", i32}, {"cols", i32}, {"scale", f32}};
  k.grid = {column_blocks, rows, 1};
  k.threads = kThreads;
  k.body = body;
  return k;
}

LoweredProgram program_of(const Kernel &k) {
  LoweredProgram p;
  p.name = k.name;
  p.kernels = {k};
  p.inputs = {k.buffers[0], k.buffers[1]};
  p.outputs = {k.buffers[2]};
  p.scalars = k.scalars;
  return p;
}

const Expr kColumnBlocks = (i32_var("cols") + (kThreads - 1)) / kThreads;

}  // namespace

TEST_CASE("a guarded elementwise kernel over a 2-D grid computes every element, rounded as the GPU does") {
  const int64_t rows = 5, cols = 300;  // 300 = 2 * 128 + 44: the third block of each row has a tail
  const HostTensor x = random_normal(f16, {rows, cols}, 1), bias = random_normal(f32, {cols}, 2);
  const float scale = 0.37f;
  // rows and cols are not given: they are the extents of x, as on the GPU.
  const auto outputs = run_program(program_of(scale_and_bias(true, kColumnBlocks)),
                                   {{"x", x}, {"bias", bias}}, {{"scale", scale}});
  const HostTensor &out = outputs.at("out");
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      // The same operations in C++ floats: each rounds to f32 once, as typed arithmetic does.
      const float product = static_cast<float>(x.get({r, c})) * scale;
      const float want = product + static_cast<float>(bias.get({c}));
      REQUIRE(out.get({r, c}) == static_cast<double>(want));
    }
  }
}

TEST_CASE("exact arithmetic runs the same kernel without rounding the intermediate product") {
  const int64_t rows = 1, cols = 130;
  const HostTensor x = random_normal(f16, {rows, cols}, 3), bias = random_normal(f32, {cols}, 4);
  const double scale = 0.1;
  InterpretOptions exact;
  exact.arithmetic = Arithmetic::exact;
  const auto outputs =
      run_program(program_of(scale_and_bias(true, kColumnBlocks)), {{"x", x}, {"bias", bias}},
                  {{"rows", rows}, {"cols", cols}, {"scale", scale}}, exact);
  for (int64_t c = 0; c < cols; ++c) {
    // The result is stored into an f32 tensor, so it is rounded once, at the end.
    const double want = x.get({0, c}) * scale + bias.get({c});
    REQUIRE(outputs.at("out").get({0, c}) == static_cast<double>(static_cast<float>(want)));
  }
}

TEST_CASE("elements that no block writes stay poisoned") {
  const int64_t rows = 2, cols = 300;
  const HostTensor x = random_normal(f16, {rows, cols}, 5), bias = random_normal(f32, {cols}, 6);
  // Rounding the block count down leaves the 44-column tail of each row to nobody.
  const auto outputs =
      run_program(program_of(scale_and_bias(true, i32_var("cols") / kThreads)), {{"x", x}, {"bias", bias}},
                  {{"rows", rows}, {"cols", cols}, {"scale", 1.0}});
  const HostTensor &out = outputs.at("out");
  for (int64_t r = 0; r < rows; ++r) {
    CHECK(std::isfinite(out.get({r, 255})));
    for (int64_t c = 256; c < cols; ++c) REQUIRE(std::isnan(out.get({r, c})));
  }
}

TEST_CASE(
    "an out-of-bounds load in an unguarded tail names the buffer, the index, its extent, the block and the "
    "thread") {
  const int64_t rows = 2, cols = 300;
  std::map<std::string, HostTensor> buffers = {{"x", random_normal(f16, {rows, cols}, 7)},
                                               {"bias", random_normal(f32, {cols}, 8)},
                                               {"out", HostTensor(f32, {rows, cols})}};
  // Without the guard, thread 44 of block (2, 1) is the first to store past the end: row 1, column 300,
  // flat index 600 of 600 elements. (Row 0's column 300 is flat index 300, inside the tensor, and so is
  // not caught: an unguarded kernel corrupts its neighbours silently on a GPU, too. Its bias load is.)
  try {
    run_kernel(scale_and_bias(false, kColumnBlocks), buffers,
               {{"rows", rows}, {"cols", cols}, {"scale", 1.0}});
    FAIL("the unguarded kernel ran");
  } catch (const Error &e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("kernel 'scale_and_bias'") != std::string::npos);
    CHECK(message.find("block (2, 0, 0)") != std::string::npos);
    CHECK(message.find("thread 44") != std::string::npos);
    CHECK(message.find("bias[300]") != std::string::npos);
    CHECK(message.find("300 elements") != std::string::npos);
  }
}

TEST_CASE("a store out of bounds of the output is reported with the output's name") {
  Kernel k;
  k.name = "overrun";
  k.buffers = {buffer("out", i32, {64}, BufferArg::Role::output)};
  k.grid = {1, 1, 1};
  k.threads = 64;
  k.body = store("out", tid(), tid() + 3);
  std::map<std::string, HostTensor> buffers = {{"out", HostTensor(i32, {64})}};
  try {
    run_kernel(k, buffers, {});
    FAIL("the overrunning kernel ran");
  } catch (const Error &e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find("thread 61") != std::string::npos);
    CHECK(message.find("store to out[64]") != std::string::npos);
    CHECK(message.find("64 elements") != std::string::npos);
    CHECK(message.find("block (0, 0, 0)") != std::string::npos);
  }
}

TEST_CASE("stores of the wrong type, into inputs, and buffers the kernel does not have are refused") {
  Kernel k;
  k.name = "bad";
  k.buffers = {buffer("in", f32, {32}, BufferArg::Role::input),
               buffer("out", f32, {32}, BufferArg::Role::output)};
  k.grid = {1, 1, 1};
  k.threads = 32;
  std::map<std::string, HostTensor> buffers = {{"in", HostTensor(f32, {32})}, {"out", HostTensor(f32, {32})}};

  k.body = store("out", Halide::cast(f16, load(f32, "in", tid())), tid());
  CHECK_THROWS_WITH_AS(run_kernel(k, buffers, {}), doctest::Contains("writes a f16 value into out"), Error);
  k.body = store("in", load(f32, "in", tid()), tid());
  CHECK_THROWS_WITH_AS(run_kernel(k, buffers, {}), doctest::Contains("read-only"), Error);
  k.body = store("out", load(f32, "nowhere", tid()), tid());
  CHECK_THROWS_WITH_AS(run_kernel(k, buffers, {}), doctest::Contains("'nowhere' names no buffer"), Error);
  k.body = store("out", load(f32, "in", tid()), tid());
  std::map<std::string, HostTensor> wrong_shape = {{"in", HostTensor(f32, {31})},
                                                   {"out", HostTensor(f32, {32})}};
  CHECK_THROWS_WITH_AS(run_kernel(k, wrong_shape, {}), doctest::Contains("f32[32], but the tensor passed"),
                       Error);
}

TEST_CASE("a program's kernels run in order, passing data through a workspace") {
  const Expr t = tid();
  Kernel twice;
  twice.name = "twice";
  twice.buffers = {buffer("x", f32, {64}, BufferArg::Role::input),
                   buffer("partial", f32, {64}, BufferArg::Role::workspace)};
  twice.grid = {1, 1, 1};
  twice.threads = 64;
  twice.body = store("partial", load(f32, "x", t) * 2.0f, t);
  Kernel plus_one = twice;
  plus_one.name = "plus_one";
  plus_one.buffers = {buffer("partial", f32, {64}, BufferArg::Role::input),
                      buffer("out", f32, {64}, BufferArg::Role::output)};
  plus_one.body = store("out", load(f32, "partial", t) + 1.0f, t);
  LoweredProgram p;
  p.name = "two_steps";
  p.kernels = {twice, plus_one};
  p.inputs = {twice.buffers[0]};
  p.outputs = {plus_one.buffers[1]};
  p.workspaces = {{"partial", f32, {64}}};
  const HostTensor x = random_normal(f32, {64}, 9);
  const auto outputs = run_program(p, {{"x", x}}, {});
  CHECK(outputs.size() == 1);
  for (int i = 0; i < 64; ++i)
    REQUIRE(outputs.at("out").get({i}) == static_cast<double>(static_cast<float>(x.get({i})) * 2.0f + 1.0f));
}

TEST_CASE("a failed assertion in a kernel reports its message and the thread") {
  Kernel k;
  k.name = "checked";
  k.buffers = {buffer("out", f32, {64}, BufferArg::Role::output)};
  k.grid = {1, 1, 1};
  k.threads = 64;
  const Expr message = Halide::Internal::Call::make(Halide::Int(32), "halide_error",
                                                    {Halide::Internal::StringImm::make("at most 40 threads")},
                                                    Halide::Internal::Call::Extern);
  k.body = Halide::Internal::AssertStmt::make(tid() < 40, message);
  std::map<std::string, HostTensor> buffers = {{"out", HostTensor(f32, {64})}};
  CHECK_THROWS_WITH_AS(
      run_kernel(k, buffers, {}),
      doctest::Contains("thread 40, at `assert((threadIdx.x < 40), halide_error(\"at most 40 threads\"))`: "
                        "assertion failed: at most 40 threads"),
      Error);
}

TEST_CASE("a kernel is not run on shapes that break a requirement it was lowered under") {
  Kernel k = scale_and_bias(true, kColumnBlocks);
  k.requirements = {{i32_var("cols") % 8 == 0, "rows are copied 16 bytes at a time"}};
  std::map<std::string, HostTensor> buffers = {
      {"x", HostTensor(f16, {2, 300})}, {"bias", HostTensor(f32, {300})}, {"out", HostTensor(f32, {2, 300})}};
  CHECK_THROWS_WITH_AS(run_kernel(k, buffers, {{"rows", 2}, {"cols", 300}, {"scale", 1.0}}),
                       doctest::Contains("rows are copied 16 bytes at a time"), Error);
  buffers = {
      {"x", HostTensor(f16, {2, 296})}, {"bias", HostTensor(f32, {296})}, {"out", HostTensor(f32, {2, 296})}};
  CHECK_NOTHROW(run_kernel(k, buffers, {{"rows", 2}, {"cols", 296}, {"scale", 1.0}}));
}
