#pragma once
// Ahead-of-time output of any lowered program for given shapes: each kernel's CUDA source (.cu), its cubin,
// a C++ header declaring the kernel, and a JSON manifest that says how to launch them (grid, block, dynamic
// shared memory, thread-block cluster, arguments in order, and the TMA tensor maps to encode over the
// buffers). NVRTC compiles the cubins, so no GPU is needed. The Python runtime
// (python/twist/runtime.py) launches from the manifest, and so do the benchmark drivers; `twist export` is
// this function applied to the library's GEMM and attention.
//
//   LoweredProgram p = lower(my_func, my_schedule, Target::sm90a());
//   cuda::export_program(p, {.label = "my_op_1024", .arch = "sm_90a", .scalars = {{"N", 1024}}}, "out/");
#include <filesystem>
#include <map>
#include <string>

#include "scheduler/arguments.h"
#include "scheduler/loop_nest.h"

namespace twist::cuda {

struct ExportRequest {
  std::string label;  // the file stem, e.g. "gemm_f16_4096x4096x4096_mma_128x128x32"
  std::string arch = "sm_90a";
  Scalars scalars;  // every scalar argument's value
  std::map<std::string, std::string>
      notes;  // recorded in the manifest as they are (op, schedule, dtype, ...)
};

// Writes <dir>/<label>.json, and per kernel <label>.<kernel>.cu, .cubin and .h; returns the manifest's path.
std::filesystem::path export_program(const LoweredProgram &program, const ExportRequest &request,
                                     const std::filesystem::path &dir);

}  // namespace twist::cuda
