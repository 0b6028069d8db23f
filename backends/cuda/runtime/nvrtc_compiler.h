#pragma once
// CUDA C++ source to a cubin with NVRTC, in process and without a GPU.
//
// Kernels are compiled as C++17 for one real architecture (sm_80, sm_90a, ...), so NVRTC runs ptxas and
// returns SASS that the driver loads without a JIT step. The toolkit headers that generated kernels use
// (cuda_fp16.h, cuda_bf16.h) are not built into NVRTC 13.0; they are found on disk, see
// cuda_include_directory(). Fast math is off unless the caller adds it to `extra`.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda/runtime/ptxas_report.h"

namespace twist::cuda {

struct CompileOptions {
  // A real architecture with SASS: "sm_80", "sm_90", "sm_90a" (wgmma, setmaxnreg), "sm_100a", ...
  // There is no default, so that no kernel is silently built for a GPU nobody meant.
  std::string arch;
  // -lineinfo: line tables in the cubin for ncu and compute-sanitizer; does not change the code.
  bool line_info = false;
  // Further NVRTC options, after twist's own ("--use_fast_math", "-DTILE_M=128", "-maxrregcount=128").
  std::vector<std::string> extra = {};
};

struct CompileResult {
  std::vector<char> cubin;
  // NVRTC's log on success: front-end and ptxas warnings, and the ptxas -v resource report.
  std::string log;
  // The resource report parsed, one entry per kernel (ptxas -v is always on; it costs nothing).
  // NVRTC 13.0 does give it: the report is part of the program log.
  std::vector<KernelResources> resources;
};

// Compiles `source`; `name` is the program's file name in messages ("gemm_128x128.cu"). Throws
// twist::Error with the NVRTC log and the source lines the log points at when compilation fails.
CompileResult compile(const std::string &source, const std::string &name, const CompileOptions &options);

// compile(...).cubin, for callers that need only the binary.
std::vector<char> compile_to_cubin(const std::string &source, const std::string &name,
                                   const CompileOptions &options);

// The exact option list compile() gives NVRTC for `options`; it is also part of the kernel cache's key.
std::vector<std::string> nvrtc_options(const CompileOptions &options);

// The version of the NVRTC library loaded at run time, "13.0".
std::string nvrtc_version();

// The SM number of a real architecture name: 90 for "sm_90" and "sm_90a", 100 for "sm_100f". Throws
// twist::Error for virtual architectures ("compute_90"), which have no cubin, and for anything else.
int sm_number(std::string_view arch);

// Where NVRTC finds cuda_fp16.h and cuda_bf16.h: $TWIST_CUDA_INCLUDE when set; else the include directory
// of the toolkit whose libnvrtc this process loaded (so headers and compiler always match, also on a
// machine whose toolkit differs from the build machine's); else the toolkit this build was configured
// with. Throws twist::Error listing the places it looked when none holds the headers.
std::filesystem::path cuda_include_directory();

}  // namespace twist::cuda
