#pragma once
// A lowered program on the GPU: its kernels compiled for the device (through the kernel cache), launched
// in order over device buffers (with their tensor maps encoded and in their thread-block clusters), with
// every launch checked, and timed as the benchmarks time kernels.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/cuda/runtime/driver.h"
#include "backends/cuda/runtime/ptxas_report.h"
#include "backends/reference/host_tensor.h"
#include "scheduler/arguments.h"
#include "scheduler/loop_nest.h"

namespace twist::cuda {

struct CompiledKernel {
  twist::Kernel ir;
  std::string source;
  std::vector<char> cubin;
  KernelResources resources;
};

// A kernel as CUDA source and a cubin for `arch` ("sm_80", "sm_90a"), through the kernel cache.
CompiledKernel compile_kernel(const twist::Kernel &kernel, const std::string &arch,
                              const CodegenOptions &options = {});

// How GpuProgram::time measures: `warmup` untimed runs (at least one, which waits for each kernel so that a
// fault names it), then `repeats` runs, each between two events on the
// stream with nothing waited for between its launches, and (with flush_l2) the L2 cache overwritten before
// each run so that no run finds its inputs cached by the one before.
struct TimingOptions {
  int warmup = 5;
  int repeats = 25;
  bool flush_l2 = true;
};

struct Timing {
  double median_ms = 0;  // of the timed runs: what to report
  double min_ms = 0;
  std::vector<double> samples_ms;  // every timed run, in order
};

class GpuProgram {
 public:
  // Compiles each kernel (its fallback for other shapes is compiled when first needed).
  GpuProgram(const LoweredProgram &program, const Device &device, const CodegenOptions &options = {});

  // Uploads the inputs, fills outputs and workspaces with 0xff bytes (NaN in every float format, so an
  // element no kernel writes cannot pass a comparison; zeroed workspaces with zeros), runs every kernel and
  // downloads the outputs.
  std::map<std::string, reference::HostTensor> run(const std::map<std::string, reference::HostTensor> &inputs,
                                                   const Scalars &given = {});

  // Times every kernel of the program together, one run being all of them in order, on these inputs (see
  // TimingOptions). The outputs of the last run are not checked: run() once first for that.
  Timing time(const std::map<std::string, reference::HostTensor> &inputs, const Scalars &given = {},
              const TimingOptions &options = {});

  // The kernel variants compiled so far, by kernel name; a variant with 64-bit offsets (Kernel::wide_offsets,
  // which keeps its kernel's name) as "<name>@64:<buffer>,<buffer>...".
  const CompiledKernel &compiled(const std::string &kernel) const;

 private:
  struct Loaded {
    CompiledKernel compiled;
    Module module;
  };
  // The program's arguments on the device: inputs uploaded, outputs and workspaces allocated and poisoned.
  struct Bound {
    Scalars scalars;
    std::map<std::string, DeviceBuffer> buffers;
    std::map<std::string, std::vector<int64_t>> output_shapes;
  };
  const Loaded &load(const twist::Kernel &kernel);
  Bound bind(const std::map<std::string, reference::HostTensor> &inputs, const Scalars &given) const;
  // Launches every kernel in order; with wait, waits for each and throws naming the one that failed.
  void launch_all(const Bound &bound, bool wait);

  const LoweredProgram program_;
  const Device &device_;
  const CodegenOptions options_;
  std::map<std::string, std::unique_ptr<Loaded>> loaded_;
};

}  // namespace twist::cuda
