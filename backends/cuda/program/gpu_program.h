#pragma once
// A lowered program on the GPU: its kernels compiled for the device (through the kernel cache), launched
// in order over device buffers (with their tensor maps encoded and in their thread-block clusters), with
// every launch checked.
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
CompiledKernel compile_kernel(const twist::Kernel &kernel, const std::string &arch, const CodegenOptions &options = {});

class GpuProgram {
 public:
  // Compiles each kernel (its fallback for other shapes is compiled when first needed).
  GpuProgram(const LoweredProgram &program, const Device &device, const CodegenOptions &options = {});

  // Uploads the inputs, fills outputs and workspaces with 0xff bytes (NaN in every float format, so an
  // element no kernel writes cannot pass a comparison), runs every kernel and downloads the outputs.
  std::map<std::string, reference::HostTensor> run(const std::map<std::string, reference::HostTensor> &inputs,
                                                   const Scalars &given = {});

  // The kernel variants compiled so far, by kernel name.
  const CompiledKernel &compiled(const std::string &kernel) const;

 private:
  struct Loaded {
    CompiledKernel compiled;
    Module module;
  };
  const Loaded &load(const twist::Kernel &kernel);

  const LoweredProgram program_;
  const Device &device_;
  const CodegenOptions options_;
  std::map<std::string, std::unique_ptr<Loaded>> loaded_;
};

}  // namespace twist::cuda
