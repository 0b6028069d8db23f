// Tensor maps encoded by the runtime and read by the hardware: a hand-written sm_90a kernel (independent of
// the scheduler's TMA lowering) loads one box per block with cp.async.bulk.tensor, waits on an mbarrier, and
// writes the shared-memory bytes out exactly as they lie, so the test sees the box, its out-of-bounds zero
// fill and the 128-byte swizzle. Launched through KernelArguments, so the parameter order is checked too.
// Without a GPU, or on one older than compute capability 9.0, each case is reported skipped.
#include <doctest/doctest.h>

#include <vector>

#include "backends/cuda/program/kernel_arguments.h"
#include "backends/cuda/runtime/driver.h"
#include "backends/cuda/runtime/nvrtc_compiler.h"
#include "tests/gpu_support.h"

using namespace twist;
using namespace twist::cuda;
using Halide::Expr;

namespace {

constexpr const char *kTmaBoxCopy = R"(
struct alignas(128) CUtensorMap {
  unsigned long long opaque[16];
};

// Block b loads the box at column col0, row row0 + b * box_rows into shared memory aligned to 1024 bytes
// (where the 128-byte swizzle pattern starts), then copies box_elements floats of it out verbatim.
extern "C" __global__ void tma_box_copy(float *out, int *cluster_blocks, const float *src, int row0, int col0,
                                        int box_rows, int box_elements, const __grid_constant__ CUtensorMap map) {
  extern __shared__ unsigned char shared[];
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  const unsigned tile = (base + 1023u) & ~1023u;
  const unsigned barrier = tile + box_elements * 4;
  const float *tile_data = reinterpret_cast<const float *>(shared + (tile - base));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(barrier));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(box_elements * 4)
                 : "memory");
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
        "[%4];" ::"r"(tile),
        "l"(reinterpret_cast<unsigned long long>(&map)), "r"(col0), "r"(row0 + static_cast<int>(blockIdx.x) * box_rows),
        "r"(barrier)
        : "memory");
    unsigned blocks;
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(blocks));
    cluster_blocks[blockIdx.x] = static_cast<int>(blocks);
  }
  __syncthreads();  // the barrier is initialized before anyone waits on it
  asm volatile(
      "{\n"
      ".reg .pred complete;\n"
      "wait:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 complete, [%0], 0;\n"
      "@!complete bra wait;\n"
      "}\n" ::"r"(barrier)
      : "memory");
  for (int i = threadIdx.x; i < box_elements; i += blockDim.x) out[blockIdx.x * box_elements + i] = tile_data[i];
}
)";

constexpr int kRows = 100, kColumns = 72;       // rows of 288 bytes: a multiple of 16, as TMA needs
constexpr int kBoxRows = 64, kBoxColumns = 32;  // 128-byte box rows, the widest the 128-byte swizzle takes
constexpr int kBoxElements = kBoxRows * kBoxColumns;

float source_value(int row, int column) {
  return static_cast<float>(row * 1000 + column + 1);  // never 0, so a zero can only be the fill
}

// Where the element at byte `offset` of a row-major box lands in shared memory: with the 128-byte swizzle,
// the 16-byte chunk index (bits 4..6) XOR the 128-byte row index within each 1024-byte block (bits 7..9).
int shared_element(int row, int column, TensorMap::Swizzle swizzle) {
  const int offset = (row * kBoxColumns + column) * 4;
  if (swizzle == TensorMap::Swizzle::none) return offset / 4;
  return (offset ^ (((offset >> 7) & 7) << 4)) / 4;
}

// Loads two boxes (one at rows row0.., one at row0 + 64..) and checks every element of each against the
// source.
void check_box_copy(TensorMap::Swizzle swizzle, std::array<int, 3> cluster, int row0, int col0) {
  Device device;
  Module module(device, compile_to_cubin(kTmaBoxCopy, "tma_box_copy.cu", {.arch = device.arch()}),
                "tma_box_copy.cu");
  cuda::Kernel kernel = module.kernel("tma_box_copy");

  constexpr int kBlocks = 2;
  twist::Kernel ir;
  ir.name = "tma_box_copy";
  ir.buffers = {{"out", f32, {Expr(kBlocks * kBoxElements)}, BufferArg::Role::output},
                {"cluster_blocks", i32, {Expr(kBlocks)}, BufferArg::Role::output},
                {"src", f32, {Expr(kRows), Expr(kColumns)}, BufferArg::Role::input}};
  ir.scalars = {{"row0", i32}, {"col0", i32}, {"box_rows", i32}, {"box_elements", i32}};
  ir.tensor_maps = {{"map", "src", {Expr(kRows), Expr(kColumns)}, {kBoxRows, kBoxColumns}, swizzle}};
  ir.cluster = cluster;

  std::vector<float> source(kRows * kColumns);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kColumns; ++c) source[r * kColumns + c] = source_value(r, c);
  DeviceBuffer src(device, source.size() * 4), out(device, kBlocks * kBoxElements * 4),
      blocks(device, kBlocks * 4);
  src.upload(source);
  out.fill(0xff);  // NaN: an element the copy misses cannot pass
  blocks.fill(0);
  KernelArguments args(
      ir, {{"out", out.address()}, {"cluster_blocks", blocks.address()}, {"src", src.address()}},
      {{"row0", row0}, {"col0", col0}, {"box_rows", kBoxRows}, {"box_elements", kBoxElements}});
  kernel.launch_and_wait({kBlocks}, {128}, kBoxElements * 4 + 1024 + 8, args.pointers(),
                         {static_cast<unsigned>(cluster[0]), 1, 1});

  const std::vector<float> copied = out.download<float>();
  int mismatches = 0, zeros = 0;
  for (int b = 0; b < kBlocks; ++b)
    for (int r = 0; r < kBoxRows; ++r)
      for (int c = 0; c < kBoxColumns; ++c) {
        const int row = row0 + b * kBoxRows + r, column = col0 + c;
        const bool inside = row >= 0 && row < kRows && column >= 0 && column < kColumns;
        const float expected = inside ? source_value(row, column) : 0.0f;
        zeros += !inside;
        const float got = copied[b * kBoxElements + shared_element(r, c, swizzle)];
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
