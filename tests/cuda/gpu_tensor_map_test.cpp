// Tensor maps encoded by the runtime and read by the hardware: a hand-written sm_90a kernel (independent of
// the scheduler's TMA lowering; test_kernels::kTmaBoxCopy) loads one box per block with cp.async.bulk.tensor,
// waits on an mbarrier, and writes the shared-memory bytes out exactly as they lie, so the test sees the box,
// its out-of-bounds zero fill and the 128-byte swizzle. Launched through KernelArguments, so the parameter
// order is checked too. Without a GPU, or on one older than compute capability 9.0, each case is reported
// skipped.
#include <doctest/doctest.h>

#include <vector>

#include "backends/cuda/program/kernel_arguments.h"
#include "backends/cuda/runtime/driver.h"
#include "backends/cuda/runtime/nvrtc_compiler.h"
#include "tests/cuda/test_kernels.h"
#include "tests/gpu_support.h"

using namespace twist;
using namespace twist::cuda;
using Halide::Expr;

namespace {

constexpr int kRows = 100, kColumns = 72;  // rows of 288 bytes: a multiple of 16, as TMA needs
constexpr int kBoxRows = 64;

// Box rows as wide as the swizzle span (32 f32 = 128 bytes without swizzle): the widest each mode takes.
int box_columns(TensorMap::Swizzle swizzle) {
  const int span = swizzle_bytes(swizzle);
  return (span == 0 ? 128 : span) / 4;
}

float source_value(int row, int column) {
  return static_cast<float>(row * 1000 + column + 1);  // never 0, so a zero can only be the fill
}

// Where the element at byte `offset` of a row-major box lands in shared memory: with a swizzle of S bytes,
// the 16-byte chunk index within the span (the S / 16 chunks at bits 4 and up) XOR the 128-byte row index
// modulo S / 16 (bits 7 and up): for 128 bytes, chunk XOR (row % 8) within each 1024-byte block; for 64
// bytes, bits 4..5 XOR bits 7..8; for 32 bytes, bit 4 XOR bit 7 (the PTX ISA's swizzle modes).
int shared_element(int row, int column, TensorMap::Swizzle swizzle) {
  const int offset = (row * box_columns(swizzle) + column) * 4;
  const int chunks = swizzle_bytes(swizzle) / 16;
  if (chunks == 0) return offset / 4;
  return (offset ^ (((offset >> 7) & (chunks - 1)) << 4)) / 4;
}

// Loads two boxes (one at rows row0.., one at row0 + 64..) and checks every element of each against the
// source.
void check_box_copy(TensorMap::Swizzle swizzle, std::array<int, 3> cluster, int row0, int col0) {
  Device device;
  Module module(device,
                compile_to_cubin(test_kernels::kTmaBoxCopy, "tma_box_copy.cu", {.arch = device.arch()}),
                "tma_box_copy.cu");
  cuda::Kernel kernel = module.kernel("tma_box_copy");

  constexpr int kBlocks = 2;
  const int columns = box_columns(swizzle), box_elements = kBoxRows * columns;
  twist::Kernel ir;
  ir.name = "tma_box_copy";
  ir.buffers = {{"out", f32, {Expr(kBlocks * box_elements)}, BufferArg::Role::output},
                {"cluster_blocks", i32, {Expr(kBlocks)}, BufferArg::Role::output},
                {"src", f32, {Expr(kRows), Expr(kColumns)}, BufferArg::Role::input}};
  ir.scalars = {{"row0", i32}, {"col0", i32}, {"box_rows", i32}, {"box_elements", i32}};
  ir.tensor_maps = {{"map", "src", {Expr(kRows), Expr(kColumns)}, {kBoxRows, columns}, swizzle}};

  std::vector<float> source(kRows * kColumns);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kColumns; ++c) source[r * kColumns + c] = source_value(r, c);
  DeviceBuffer src(device, source.size() * 4), out(device, kBlocks * box_elements * 4),
      blocks(device, kBlocks * 4);
  src.upload(source);
  out.fill(0xff);  // NaN: an element the copy misses cannot pass
  blocks.fill(0);
  KernelArguments args(
      ir, {{"out", out.address()}, {"cluster_blocks", blocks.address()}, {"src", src.address()}},
      {{"row0", row0}, {"col0", col0}, {"box_rows", kBoxRows}, {"box_elements", box_elements}});
  kernel.launch_and_wait({kBlocks}, {128}, box_elements * 4 + 1024 + 8, args.pointers(),
                         {static_cast<unsigned>(cluster[0]), 1, 1});

  const std::vector<float> copied = out.download<float>();
  int mismatches = 0, zeros = 0;
  for (int b = 0; b < kBlocks; ++b)
    for (int r = 0; r < kBoxRows; ++r)
      for (int c = 0; c < columns; ++c) {
        const int row = row0 + b * kBoxRows + r, column = col0 + c;
        const bool inside = row >= 0 && row < kRows && column >= 0 && column < kColumns;
        const float expected = inside ? source_value(row, column) : 0.0f;
        zeros += !inside;
        const float got = copied[b * box_elements + shared_element(r, c, swizzle)];
        if (got != expected && mismatches++ < 5)
          MESSAGE("block ", b, " box element (", r, ", ", c, "): expected ", expected, ", got ", got);
      }
  CHECK(mismatches == 0);
  CHECK(zeros > 0);  // the boxes were placed to reach past the tensor's edges
  for (int got : blocks.download<int>()) CHECK(got == cluster[0]);
}

}  // namespace

TEST_CASE("a TMA box without swizzle lands row-major in shared memory, zero past the tensor's edges") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA");
  check_box_copy(TensorMap::Swizzle::none, {1, 1, 1}, 8, 48);
}

TEST_CASE("a TMA box with the 128-byte swizzle lands at chunk XOR row, launched in clusters of two blocks") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA");
  check_box_copy(TensorMap::Swizzle::b128, {2, 1, 1}, 8, 48);
  check_box_copy(TensorMap::Swizzle::b128, {2, 1, 1}, -3, -16);  // negative coordinates read as zero fill too
}

TEST_CASE("TMA boxes with the 64- and 32-byte swizzles land at chunk XOR row within their spans") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA");
  check_box_copy(TensorMap::Swizzle::b64, {1, 1, 1}, 8, 40);
  check_box_copy(TensorMap::Swizzle::b32, {2, 1, 1}, 8, 68);
}
