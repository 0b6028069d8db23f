#pragma once
// The twist intrinsics of the loop-nest IR (see loop_nest.h). Each is an Evaluate of an Extern Call named
// "twist.<op>" whose arguments are listed below; the builders and the matchers here are the one definition
// the lowering, the CUDA printer and the reference interpreter share.
//
// Buffer operands are named by a StringImm: a kernel buffer (global), or the name of an enclosing
// Allocate (shared or registers). Indices are in elements of that buffer's type.
#include <Halide.h>

#include <optional>
#include <string>

namespace twist::intrinsic {

using Halide::Expr;
using Halide::Internal::Stmt;

// Every thread of the block waits here (__syncthreads).
Stmt barrier();

// Copies `bytes` (4, 8 or 16) from src[src_index...] to dst[dst_index...]; only the first `src_bytes`
// (an expression, 0 <= src_bytes <= bytes) are read and the rest are zero-filled, which is how copies
// at a tensor's edge stay in bounds. `async` copies are cp.async: they complete only at a wait (below);
// synchronous copies complete at once. Both addresses must be aligned to `bytes`.
struct Copy {
  std::string dst;
  Expr dst_index;
  std::string src;
  Expr src_index;
  int bytes = 16;
  Expr src_bytes;
  bool async = false;
};
Stmt copy(const Copy &c);
std::optional<Copy> as_copy(const Stmt &s);

// Closes the group of asynchronous copies this thread issued since the last commit.
Stmt async_commit();
// Waits until at most `pending` of this thread's committed groups are still in flight.
Stmt async_wait(int pending);
std::optional<int> as_async_wait(const Stmt &s);

// ldmatrix.sync.aligned.m8n8.x{matrices}{.trans}.shared.b16, by one warp: lane l gives, in src_index, the
// element index of one 8-element row (lanes 8m..8m+7 the rows of matrix m); afterwards each lane holds two
// 16-bit elements of each matrix at dst[dst_index + 2m], dst[dst_index + 2m + 1]: without transpose row
// l/4, columns 2(l%4) and 2(l%4)+1; with transpose rows 2(l%4) and 2(l%4)+1 of column l/4.
struct Ldmatrix {
  std::string dst;
  Expr dst_index;
  int matrices = 4;
  bool transpose = false;
  std::string src;
  Expr src_index;
};
Stmt ldmatrix(const Ldmatrix &l);
std::optional<Ldmatrix> as_ldmatrix(const Stmt &s);

// mma.sync.aligned.m16n8k16.row.col, by one warp: D = A * B + C with A 16x16 and B 16x8 in f16 or bf16,
// C and D 16x8 in f32 or f16. Per lane (g = lane / 4, t = lane % 4), the fragments are register arrays:
//   A: 8 elements a[0..7] at (row, col) = (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1),
//                                          (g, 2t+8), (g, 2t+9), (g+8, 2t+8), (g+8, 2t+9)
//   B: 4 elements b[0..3] at (k, n) = (2t, g), (2t+1, g), (2t+8, g), (2t+9, g)
//   C, D: 4 elements c[0..3] at (row, col) = (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)
struct Mma {
  std::string d, a, b, c;
  Expr d_index, a_index, b_index, c_index;
};
Stmt mma(const Mma &m);
std::optional<Mma> as_mma(const Stmt &s);

// Within a warp: dst[dst_index] = the value of `value` in lane (lane ^ lane_mask).
struct ShuffleXor {
  std::string dst;
  Expr dst_index;
  Expr value;
  int lane_mask = 1;
};
Stmt shuffle_xor(const ShuffleXor &s);
std::optional<ShuffleXor> as_shuffle_xor(const Stmt &s);

// buffer[index] += value, atomically (f32 or i32 global buffers).
struct AtomicAdd {
  std::string buffer;
  Expr index;
  Expr value;
};
Stmt atomic_add(const AtomicAdd &a);
std::optional<AtomicAdd> as_atomic_add(const Stmt &s);

bool is_barrier(const Stmt &s);
bool is_async_commit(const Stmt &s);
// Whether s is any twist intrinsic (for printers that must handle all of them).
bool is_intrinsic(const Stmt &s);

// The thread and block index variables.
Expr thread_index();
Expr block_index(int dim);  // 0, 1, 2 for x, y, z
inline constexpr const char *kThreadIndex = "threadIdx.x";
inline constexpr const char *kBlockIndex[3] = {"blockIdx.x", "blockIdx.y", "blockIdx.z"};

}  // namespace twist::intrinsic
