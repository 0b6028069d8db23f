#pragma once
// The CUDA driver API, loaded at run time with dlopen("libcuda.so.1") instead of linked: the build machines
// have only the toolkit's stub libcuda, and a program linked against it cannot start there. Loading it
// lets the same binary run its CPU work anywhere and its GPU work where a driver is installed.
//
// Most code wants driver.h (Device, Module, Kernel, DeviceBuffer, Timer); this is the layer under it.
#include <cuda.h>

#include <optional>
#include <string>
#include <string_view>

namespace twist::cuda {

// The driver functions twist resolves, each named as cuda.h declares it. Where cuda.h maps a name to a
// versioned entry point (cuMemAlloc is cuMemAlloc_v2, cuEventElapsedTime is cuEventElapsedTime_v2), the
// macro is expanded in both the member's type and the symbol looked up, so that the two always agree.
// clang-format off
#define TWIST_CUDA_DRIVER_FUNCTIONS(X)                                                                  \
  X(cuInit) X(cuGetErrorName) X(cuGetErrorString)                                                       \
  X(cuDeviceGet) X(cuDeviceGetCount) X(cuDeviceGetName) X(cuDeviceGetAttribute)                         \
  X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxSynchronize)       \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction)                                          \
  X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuLaunchKernel)                                         \
  X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemsetD8)                              \
  X(cuEventCreate) X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventDestroy)
// clang-format on

// Call them as driver().cuMemAlloc(&ptr, bytes), exactly like the C API.
struct DriverApi {
#define TWIST_DECLARE_DRIVER_FUNCTION(function) decltype(&::function) function = nullptr;
  TWIST_CUDA_DRIVER_FUNCTIONS(TWIST_DECLARE_DRIVER_FUNCTION)
#undef TWIST_DECLARE_DRIVER_FUNCTION
  // For TMA descriptors and thread-block cluster launches. Optional, so that older drivers still run
  // everything else: nullptr when the driver does not export them.
  decltype(&::cuTensorMapEncodeTiled) cuTensorMapEncodeTiled = nullptr;
  decltype(&::cuLaunchKernelEx) cuLaunchKernelEx = nullptr;
};

// The outcome of loading a driver library: the functions, or a sentence saying why there is no usable GPU.
struct DriverLoad {
  std::optional<DriverApi> api;    // set when the library loaded, cuInit succeeded and there is a device
  std::string unavailable_reason;  // set otherwise
};

// Loads `library` (the real driver is "libcuda.so.1"), resolves the functions, calls cuInit(0) and counts
// devices. Never throws: every failure is a reason. The library stays loaded for the life of the process.
DriverLoad load_driver(const std::string &library);

// nullopt when this process can use a GPU; otherwise a sentence saying why not: libcuda.so.1 cannot be
// loaded, cuInit failed (with the driver's error name), or the driver sees no device.
std::optional<std::string> gpu_unavailable_reason();

// The process's driver, from libcuda.so.1, loaded on first use. Throws twist::Error with the reason when
// there is no usable GPU.
const DriverApi &driver();

// What went wrong in a driver call, as a twist error message: the call, the driver's name and description
// of the error, what twist was doing ("allocating 4096 bytes"), and what to do about that kind of error.
std::string describe_driver_failure(CUresult result, std::string_view call, std::string_view doing);

// Throws twist::Error with describe_driver_failure(...) unless `result` is CUDA_SUCCESS.
void check(CUresult result, std::string_view call, std::string_view doing);

}  // namespace twist::cuda
