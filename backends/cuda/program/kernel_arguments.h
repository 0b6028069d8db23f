#pragma once
// A kernel's parameter values for cuLaunchKernel, in the order the CUDA printer declares them: the buffers'
// device addresses, then the scalars, then the tensor maps (`const __grid_constant__ CUtensorMap`, encoded
// from the kernel's TensorMap descriptions over the buffers' addresses).
#include <cuda.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backends/cuda/runtime/tensor_map.h"
#include "scheduler/arguments.h"
#include "scheduler/loop_nest.h"

namespace twist::cuda {

// The bytes of the span within which `s` swizzles 16-byte chunks: 0 for none, else 32, 64 or 128.
int swizzle_bytes(TensorMap::Swizzle s);

// What `map` of `kernel` asks TMA for, with its extents evaluated over `scalars`, over the buffer at
// `address`. Throws, naming the map, when its buffer is not one of the kernel's or its extents do not cover
// the buffer exactly (their product must be the buffer's element count).
TensorMapRequest tensor_map_request(const twist::Kernel &kernel, const TensorMap &map, const Scalars &scalars,
                                    CUdeviceptr address);

// Throws, naming the buffer and its element count, when a buffer of `kernel` over `scalars` holds more
// elements than the 32-bit offsets of the generated code reach (2^31 - 1): the kernel would read and write
// elsewhere. The buffers the kernel addresses in 64 bits (Kernel::wide_offsets) may hold any number;
// select_variant picks a kernel's variant with 64-bit offsets where a buffer needs one, so after it this
// refuses nothing the lowering made: it guards kernels built or chosen some other way.
void check_offsets_fit(const twist::Kernel &kernel, const Scalars &scalars);

// Encodes a tensor map: encode_tensor_map (through the driver) when launching; tests substitute their own.
using TensorMapEncoder = std::function<CUtensorMap(const TensorMapRequest &)>;

class KernelArguments {
 public:
  // Throws, naming the kernel, when a buffer has no address, a scalar no value or one past its type, or
  // check_offsets_fit fails.
  KernelArguments(const twist::Kernel &kernel, const std::map<std::string, CUdeviceptr> &addresses,
                  const Scalars &scalars, const TensorMapEncoder &encode = encode_tensor_map);
  KernelArguments(const KernelArguments &) = delete;
  KernelArguments &operator=(const KernelArguments &) = delete;

  // pointers()[i] points at the value of the i-th parameter, as cuLaunchKernel takes them.
  void **pointers() { return pointers_.data(); }
  size_t count() const { return pointers_.size(); }

 private:
  std::vector<CUdeviceptr> addresses_;
  std::vector<std::vector<unsigned char>> scalars_;
  std::vector<CUtensorMap> tensor_maps_;  // CUtensorMap is 128-byte aligned; so is each element here
  std::vector<void *> pointers_;
};

}  // namespace twist::cuda
