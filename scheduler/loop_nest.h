#pragma once
// The loop-nest IR: what the scheduler lowers a program to, and what every backend consumes.
//
// A kernel body is a Halide statement written from the point of view of one GPU thread:
//   - `blockIdx.x/y/z` and `threadIdx.x` are i32 Variables (blocks are 1-D in threads; warps are
//     threadIdx.x / 32);
//   - global tensors are the kernel's buffers, read with Load and written with Store at a flat row-major
//     element index;
//   - shared memory and registers are Allocate nodes with MemoryType::GPUShared and MemoryType::Register
//     (register arrays are only indexed with values known after unrolling); shared arrays whose scopes do
//     not nest share bytes (see shared_arrays), so a barrier must separate the last use of one from the
//     first use of the next;
//   - For loops are Serial or Unrolled (fully unrolled: their extent is a constant);
//   - barriers, asynchronous copies, matrix fragments loads and matrix-multiply atoms are the twist
//     intrinsics of scheduler/intrinsics.h, each an Evaluate of an Extern Call.
// The CUDA backend prints this IR; the reference backend interprets it thread by thread in lockstep, so the
// lowering is tested on machines without a GPU.
#include <Halide.h>

#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lang/types.h"

namespace twist {

using Halide::Internal::Stmt;

struct BufferArg {
  enum class Role { input, output, workspace };
  std::string name;
  Type type;
  std::vector<Halide::Expr> shape;  // extents over the kernel's scalar arguments, dimension 0 outermost
  Role role = Role::input;
};

// "input", "output" or "workspace", for messages and dumps.
const char *role_name(BufferArg::Role r);

struct ScalarArg {
  std::string name;
  Type type;
};

// A condition on the scalar arguments that a kernel was lowered under (e.g. that K is a multiple of 8, so
// 16-byte copies of a row stay aligned); the runtime checks each before launching and reports `why`.
struct Requirement {
  Halide::Expr condition;
  std::string why;
};

// A TMA tensor map (CUtensorMap) over one of the kernel's global buffers: encoded on the host before launch
// (cuTensorMapEncodeTiled) and passed by value as a `const __grid_constant__ CUtensorMap` parameter, after
// the buffers and the scalars, in this order. The buffer is dense row-major with the shape of its BufferArg.
// Out-of-bounds elements of a box read as zero (OOB fill none), interleave none, L2 promotion 128B, element
// type from the buffer's type.
struct TensorMap {
  enum class Swizzle { none, b32, b64, b128 };
  std::string name;    // the parameter's name; TMA intrinsics refer to it
  std::string buffer;  // the kernel buffer it describes
  std::vector<Halide::Expr>
      extents;           // the tensor's extents seen by TMA, dimension 0 outermost (may regroup the
                         // buffer's dims, e.g. a batch folded into rows; product == buffer size)
  std::vector<int> box;  // elements per box dimension, dimension 0 outermost; each 1..256
  Swizzle swizzle = Swizzle::none;  // the box's innermost row must be 32/64/128 bytes for the swizzle modes
};

// "none", "32B", "64B" or "128B", for messages, dumps and the AOT manifest.
const char *swizzle_name(TensorMap::Swizzle s);

// Scratch tensors a program needs between its kernels (split-K partial states), or between the blocks of
// one kernel (SplitCombine::last_block: the parts and the arrival counters).
struct Workspace {
  std::string name;
  Type type;
  std::vector<Halide::Expr> shape;
  // The kernels expect zeros here when they start and leave zeros when they finish (arrival counters, which
  // the last block of each tile resets): the runtime zeroes it once, when it allocates it (GpuProgram, the
  // manifest's "zeroed" for the Python launcher, the interpreter's run_program), and never poisons it.
  bool zeroed = false;
};

struct Kernel;
// Kernel::wide_variants: the variants made so far, by the buffers they address in 64 bits.
struct WideVariants {
  std::mutex mutex;
  std::map<std::vector<std::string>, std::shared_ptr<const Kernel>> made;
};

struct Kernel {
  std::string name;
  std::vector<BufferArg> buffers;
  std::vector<ScalarArg> scalars;
  std::array<Halide::Expr, 3> grid;  // blocks in x, y and z, over the scalar arguments
  int threads = 0;                   // threads per block
  int min_blocks_per_sm = 1;         // for __launch_bounds__
  int shared_bytes = 0;              // dynamic shared memory, every GPUShared allocation of the body
  bool fast_math = false;            // exp and exp2 of f32 as the approximate hardware instructions
  std::vector<Requirement> requirements;
  std::vector<TensorMap> tensor_maps;
  std::array<int, 3> cluster = {1, 1,
                                1};  // thread-block cluster shape; any > 1 launches with cuLaunchKernelEx
  // Launched with programmatic stream serialization (Target::has_dependent_launch): the kernel begins by
  // waiting for the grids before it in the stream to complete and their writes to be visible
  // (griddepcontrol.wait, before any other instruction), and lets the next kernel launch once all its blocks
  // have started (griddepcontrol.launch_dependents). A kernel's launch and its blocks' arrival on the SMs
  // then overlap the previous kernel's last wave (a split's combine kernel after its parts, one stage of a
  // pipeline after another) instead of following its end.
  bool dependent_launch = false;
  // The kernel to launch instead when a requirement does not hold: the same schedule with copies narrow
  // enough for any shape (see select_variant in scheduler/arguments.h).
  std::shared_ptr<const Kernel> fallback;
  Stmt body;
  // The instructions the schedule asked for ("mma.sync.aligned.m16n8k16", "cp.async.cg.shared.global",
  // "ldmatrix.sync.aligned"): tests check that the generated source contains them.
  std::vector<std::string> required_instructions;
  std::string schedule_summary;  // one line per decision, for dumps
  // Scratch the kernel's blocks share (stream-K's parts and arrival counters), which the stage adds to
  // LoweredProgram::workspaces.
  std::vector<Workspace> workspaces;
  // The buffers whose element offsets this kernel computes in 64 bits (scheduler/wide_offsets.h): they may
  // hold any number of elements. Offsets into the others are 32-bit, and the runtime refuses a launch where
  // one of them holds more than 2^31 - 1 elements (check_offsets_fit).
  std::vector<std::string> wide_offsets;
  // Where a buffer's extents can pass 2^31 - 1 elements (symbolic ones can), the variants of this kernel
  // with 64-bit offsets into the buffers that pass them at a launch: select_variant makes each on first use
  // and keeps it here, shared by the copies of this kernel. Null when no buffer can pass, or when this
  // kernel already addresses every one that can in 64 bits.
  std::shared_ptr<WideVariants> wide_variants;
};

// Everything one schedule of a program lowers to: kernels to launch in order.
struct LoweredProgram {
  std::string name;
  std::vector<Kernel> kernels;
  std::vector<BufferArg> inputs;   // the program's input tensors
  std::vector<BufferArg> outputs;  // the output func's values, one tensor each
  std::vector<Workspace> workspaces;
  std::vector<ScalarArg> scalars;  // every scalar and size parameter the kernels read
};

// Where each shared array of a kernel body lives in the block's shared memory: at a 128-byte aligned offset
// past the arrays whose scopes enclose it, so that arrays in disjoint scopes (a GEMM's staged inputs and the
// output tile its epilogue writes back) reuse the same bytes. `bytes` is what the block needs.
struct SharedArray {
  const Halide::Internal::Allocate *allocate;
  int offset = 0, bytes = 0;
};
struct SharedArrays {
  std::vector<SharedArray> arrays;
  int bytes = 0;
};
SharedArrays shared_arrays(const Stmt &body);

// The printed loop nest of every kernel, for dumps and for FileCheck-style tests.
std::string to_string(const Kernel &k);
std::string to_string(const LoweredProgram &p);

}  // namespace twist
