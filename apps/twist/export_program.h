#pragma once
// Ahead-of-time output of a lowered program for given shapes: each kernel's CUDA source (.cu), its cubin,
// a C++ header declaring the kernels, and a JSON manifest that says how to launch them (grid, block,
// dynamic shared memory, thread-block cluster, arguments in order, and the TMA tensor maps to encode over
// the buffers). The benchmark drivers launch from the manifest.
#include <filesystem>
#include <map>
#include <string>

#include "scheduler/arguments.h"
#include "scheduler/loop_nest.h"

namespace twist::tool {

struct ExportRequest {
  std::string label;  // the file stem, e.g. "gemm_f16_4096x4096x4096_mma_128x128x32"
  std::string arch = "sm_90a";
  Scalars scalars;    // every scalar argument's value
  std::map<std::string, std::string> notes;  // recorded in the manifest as they are (schedule name, dtype, ...)
};

// Writes <dir>/<label>.json, and per kernel <label>.<kernel>.cu, .cubin and .h; returns the manifest's path.
std::filesystem::path export_program(const LoweredProgram &program, const ExportRequest &request,
                                     const std::filesystem::path &dir);

}  // namespace twist::tool
