#include "backends/cuda/runtime/driver_api.h"

#include <dlfcn.h>

#include "lang/error.h"

namespace twist::cuda {

namespace {

// The symbol name after macro expansion: "cuMemAlloc_v2" for cuMemAlloc.
#define TWIST_SYMBOL_NAME(function) #function
#define TWIST_EXPANDED_SYMBOL_NAME(function) TWIST_SYMBOL_NAME(function)

// The driver's name and description of an error: "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)".
std::string explain(const DriverApi &api, CUresult result) {
  const char *name = nullptr, *text = nullptr;
  if (api.cuGetErrorName(result, &name) == CUDA_SUCCESS && name != nullptr) {
    bool described = api.cuGetErrorString(result, &text) == CUDA_SUCCESS && text != nullptr;
    return fmt::format("{} ({})", name, described ? text : "no description");
  }
  // The toolkit's stub answers every call, these two included, with CUDA_ERROR_STUB_LIBRARY.
  if (result == CUDA_ERROR_STUB_LIBRARY)
    return "CUDA_ERROR_STUB_LIBRARY (this is the CUDA toolkit's stub library, not a driver)";
  return fmt::format("CUresult {} (the driver gives it no name)", static_cast<int>(result));
}

std::string_view advice_for(CUresult result) {
  switch (result) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return "the GPU is out of memory: free buffers or use smaller problems";
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_FAILED:
      return "a kernel faulted, which leaves the context unusable until the process restarts; run it under "
             "compute-sanitizer to find the faulting access";
    case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES:
      return "a block needs more registers than an SM has: launch fewer threads per block or make the kernel "
             "use fewer registers (__launch_bounds__, -maxrregcount)";
    case CUDA_ERROR_LAUNCH_TIMEOUT:
      return "the kernel ran past the display watchdog's limit: give it less work per launch";
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
      return "the cubin was not built for this GPU: compile it for Device::arch()";
    case CUDA_ERROR_INVALID_VALUE:
      return "an argument is out of range for this call or this device: check sizes and the launch "
             "configuration against the device's limits";
    case CUDA_ERROR_INVALID_CONTEXT:
      return "no CUDA context is current on this thread: call Device::make_current() on it first";
    case CUDA_ERROR_NOT_FOUND:
      return "the module has no such name: kernels are looked up by symbol, so declare them extern \"C\"";
    default:
      return "look the error up in the CUDA driver API documentation";
  }
}

}  // namespace

DriverLoad load_driver(const std::string &library) {
  void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr)
    return {std::nullopt, fmt::format("the CUDA driver library {} cannot be loaded ({}); this machine has no "
                                      "NVIDIA driver",
                                      library, dlerror())};
  DriverApi api;
  std::string missing;
#define TWIST_RESOLVE_DRIVER_FUNCTION(function)                                                      \
  api.function =                                                                                     \
      reinterpret_cast<decltype(api.function)>(dlsym(handle, TWIST_EXPANDED_SYMBOL_NAME(function))); \
  if (api.function == nullptr) missing += fmt::format(" {}", TWIST_EXPANDED_SYMBOL_NAME(function));
  TWIST_CUDA_DRIVER_FUNCTIONS(TWIST_RESOLVE_DRIVER_FUNCTION)
#undef TWIST_RESOLVE_DRIVER_FUNCTION
  api.cuTensorMapEncodeTiled =
      reinterpret_cast<decltype(api.cuTensorMapEncodeTiled)>(dlsym(handle, "cuTensorMapEncodeTiled"));
  api.cuLaunchKernelEx = reinterpret_cast<decltype(api.cuLaunchKernelEx)>(
      dlsym(handle, TWIST_EXPANDED_SYMBOL_NAME(cuLaunchKernelEx)));
  if (!missing.empty())
    return {std::nullopt,
            fmt::format("the CUDA driver {} lacks functions twist needs ({}); it is older than "
                        "the CUDA {}.{} headers twist was built with, so update the driver",
                        library, missing.substr(1), CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10)};
  CUresult initialized = api.cuInit(0);
  if (initialized != CUDA_SUCCESS)
    return {std::nullopt, fmt::format("cuInit failed with {}", explain(api, initialized))};
  int devices = 0;
  CUresult counted = api.cuDeviceGetCount(&devices);
  if (counted != CUDA_SUCCESS)
    return {std::nullopt, fmt::format("cuDeviceGetCount failed with {}", explain(api, counted))};
  if (devices == 0) return {std::nullopt, "the CUDA driver loaded but sees no device"};
  return {api, ""};
}

namespace {

const DriverLoad &process_driver() {
  static const DriverLoad load = load_driver("libcuda.so.1");
  return load;
}

}  // namespace

std::optional<std::string> gpu_unavailable_reason() {
  const DriverLoad &load = process_driver();
  if (load.api) return std::nullopt;
  return load.unavailable_reason;
}

const DriverApi &driver() {
  const DriverLoad &load = process_driver();
  if (!load.api)
    fail(
        "no usable GPU: {}. Run GPU work on a machine with an NVIDIA GPU and driver, and check "
        "gpu_unavailable_reason() before starting it",
        load.unavailable_reason);
  return *load.api;
}

std::string describe_driver_failure(CUresult result, std::string_view call, std::string_view doing) {
  return fmt::format("{} failed while {}: {}. What to do: {}", call, doing, explain(driver(), result),
                     advice_for(result));
}

void check(CUresult result, std::string_view call, std::string_view doing) {
  if (result != CUDA_SUCCESS) throw Error(describe_driver_failure(result, call, doing));
}

}  // namespace twist::cuda
