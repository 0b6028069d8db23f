#pragma once
// CUDA sources shared by the compile tests (which need no GPU) and the GPU tests that run them.
#include <string>

namespace twist::cuda::test_kernels {

// One warp computes C = A * B for a 16x16 f16 tile A (row-major) and a 16x8 f16 tile B (row-major, B[k][n]),
// the way generated GEMMs do: A reaches shared memory with cp.async, its fragments come out of shared
// memory with ldmatrix, and mma.sync m16n8k16 accumulates in f32. C is written as f32 and as bf16 (row-major
// 16x8). 512 bytes of static shared memory.
inline const std::string kTensorCoreTile = R"(
#include <cuda_bf16.h>
#include <cuda_fp16.h>

extern "C" __global__ void tensor_core_tile(const __half *a, const __half *b, float *c, __nv_bfloat16 *c_bf16) {
  __shared__ __align__(128) __half a_tile[16 * 16];
  const int lane = threadIdx.x;
  // 512 bytes of A: one 16-byte chunk per lane.
  unsigned chunk = static_cast<unsigned>(__cvta_generic_to_shared(a_tile + lane * 8));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(chunk), "l"(a + lane * 8) : "memory");
  asm volatile("cp.async.commit_group;\n" ::: "memory");
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  __syncthreads();

  // ldmatrix x4: lanes 0-15 give rows 0-15 at column 0, lanes 16-31 rows 0-15 at column 8, so the four
  // 8x8 matrices are A's quadrants in the order mma expects (top-left, bottom-left, top-right, bottom-right).
  unsigned a_fragment[4];
  unsigned row_address = static_cast<unsigned>(__cvta_generic_to_shared(a_tile + (lane % 16) * 16 + (lane / 16) * 8));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(a_fragment[0]), "=r"(a_fragment[1]), "=r"(a_fragment[2]), "=r"(a_fragment[3])
               : "r"(row_address));

  // B's fragment: lane holds B[k][n] for n = lane / 4 and k = 2 * (lane % 4) + {0, 1} (+ 8 in the second register).
  const int group = lane / 4, pair = 2 * (lane % 4);
  unsigned b_fragment[2];
  for (int half = 0; half < 2; ++half) {
    int k = pair + 8 * half;
    __half2 two = __halves2half2(b[k * 8 + group], b[(k + 1) * 8 + group]);
    b_fragment[half] = *reinterpret_cast<unsigned *>(&two);
  }

  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a_fragment[0]), "r"(a_fragment[1]), "r"(a_fragment[2]), "r"(a_fragment[3]), "r"(b_fragment[0]),
        "r"(b_fragment[1]));
  // d[i] is C[group + 8 * (i / 2)][pair + i % 2].
  for (int i = 0; i < 4; ++i) {
    int at = (group + 8 * (i / 2)) * 8 + pair + i % 2;
    c[at] = d[i];
    c_bf16[at] = __float2bfloat16(d[i]);
  }
}
)";
inline constexpr int kTensorCoreTileSharedBytes = 16 * 16 * 2;

// A Hopper-only instruction: ptxas accepts it for sm_90a and refuses it for sm_90.
inline const std::string kWgmmaFence = R"(
extern "C" __global__ void wgmma_fence(float *out) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  out[threadIdx.x] = 1.0f;
}
)";

// a[i] = 2 * b[i] + i for i < n.
inline const std::string kScaleAdd = R"(
extern "C" __global__ void scale_add(float *a, const float *b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = 2.0f * b[i] + static_cast<float>(i);
}
)";

// Stages `words` 32-bit words through dynamic shared memory and writes them back reversed, so every byte of
// the shared memory it was launched with is written and read.
inline const std::string kReverseThroughShared = R"(
extern "C" __global__ void reverse_through_shared(const unsigned *in, unsigned *out, int words) {
  extern __shared__ unsigned staged[];
  for (int i = threadIdx.x; i < words; i += blockDim.x) staged[i] = in[i];
  __syncthreads();
  for (int i = threadIdx.x; i < words; i += blockDim.x) out[i] = staged[words - 1 - i];
}
)";

// Writes through the pointer it is given; launched with a null pointer, it faults.
inline const std::string kWriteThrough = R"(
extern "C" __global__ void write_through(int *p) { p[threadIdx.x] = 1; }
)";

// One TMA box per block: cp.async.bulk.tensor of a 2-D box of f32 into shared memory aligned to 1024 bytes,
// completing on an mbarrier, copied out exactly as it lies in shared memory (so a test sees the swizzle);
// each block also writes how many blocks its cluster has. Dynamic shared memory: box bytes + 1024 + 8.
inline const std::string kTmaBoxCopy = R"(
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

}  // namespace twist::cuda::test_kernels
