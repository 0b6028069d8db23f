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

}  // namespace twist::cuda::test_kernels
