#pragma once
// The loop-nest IR to CUDA C++: one translation unit per kernel, with the twist intrinsics as inline PTX
// (cp.async, ldmatrix, mma.sync) in small device functions that the unit defines.
#include <string>

#include "scheduler/loop_nest.h"

namespace twist::cuda {

struct CodegenOptions {
  // Approximate exp2/exp (ex2.approx): what FlashAttention-style kernels use; off keeps libdevice's.
  bool fast_math = false;
};

// The kernel's source: includes, helpers, and an extern "C" __global__ function named after the kernel
// (sanitized) whose parameters are the kernel's buffers (pointers, in order) then its scalars.
std::string cuda_source(const Kernel &kernel, const CodegenOptions &options = {});

// The C identifier a loop-nest name prints as ("r.x" -> "r_x").
std::string c_name(const std::string &name);

// The C type of an element type ("__half", "__nv_bfloat16", "float", "double", "int", "bool").
std::string c_type(const Type &t);

}  // namespace twist::cuda
