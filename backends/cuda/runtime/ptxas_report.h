#pragma once
// The resource report ptxas prints with -v ("Used 64 registers, 4000 bytes smem, ..."), parsed into numbers
// so that the scheduler can see register demand and spills of the kernels it generated.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace twist::cuda {

// One entry function (kernel) as ptxas compiled it. ptxas leaves out items that are zero (a kernel without
// shared memory has no "bytes smem"), so an item missing from the report reads as 0.
struct KernelResources {
  std::string kernel;  // the symbol name, mangled unless the kernel is extern "C"
  int registers = 0;   // per thread
  int barriers = 0;
  int shared_bytes = 0;    // static shared memory; dynamic shared memory is chosen at launch
  int constant_bytes = 0;  // cmem[0]: the kernel's parameters and the driver's constants
  int stack_frame_bytes = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
};

// The entry functions of a ptxas -v report, in the order ptxas compiled them. Lines of the log that are
// not part of the report (warnings, the front end's messages) are ignored, so the whole NVRTC log can be
// passed. Device functions that are not kernels get properties lines too; they are not reported.
std::vector<KernelResources> parse_ptxas_report(std::string_view log);

// The entry named `kernel` in `report`, if ptxas compiled one.
std::optional<KernelResources> find_kernel(const std::vector<KernelResources> &report,
                                           std::string_view kernel);

}  // namespace twist::cuda
