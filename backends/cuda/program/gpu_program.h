#pragma once
// A lowered program on the GPU: its kernels compiled for the device (through the kernel cache), launched
// in order over device buffers, with every launch checked.
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

// Each kernel of `program` as CUDA source and a cubin for `arch` ("sm_80", "sm_90a"), through the cache.
std::vector<CompiledKernel> compile_program(const LoweredProgram &program, const std::string &arch,
                                            const CodegenOptions &options = {});

class GpuProgram {
 public:
  GpuProgram(const LoweredProgram &program, const Device &device, const CodegenOptions &options = {});

  // Uploads the inputs, fills outputs and workspaces with 0xff bytes (NaN in every float format, so an
  // element no kernel writes cannot pass a comparison), runs every kernel and downloads the outputs.
  std::map<std::string, reference::HostTensor> run(const std::map<std::string, reference::HostTensor> &inputs,
                                                   const Scalars &given = {});

  const std::vector<CompiledKernel> &kernels() const { return kernels_; }

 private:
  const LoweredProgram program_;
  const Device &device_;
  std::vector<CompiledKernel> kernels_;
  std::vector<Module> modules_;
};

}  // namespace twist::cuda
