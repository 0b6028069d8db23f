#pragma once
// Owning wrappers over the CUDA driver: a device and its primary context, modules loaded from cubins,
// kernels, device memory and event timers. Every driver call is checked; a failure throws twist::Error
// naming the call, the driver's error and the kernel or buffer involved.
//
// Objects made from a Device keep its context alive, so they may outlive the Device object. The context
// is made current on the thread that constructs the Device; other threads call make_current() first.
#include <cuda.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cuda/runtime/driver_api.h"

namespace twist::cuda {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct DeviceProperties {
  int ordinal = 0;
  std::string name;
  int compute_capability_major = 0;
  int compute_capability_minor = 0;
  int sm_count = 0;
  int max_threads_per_block = 0;
  int max_shared_memory_per_block = 0;        // without opting in: 48 KB
  int max_shared_memory_per_block_optin = 0;  // what a kernel may use after opting in (227 KB on Hopper)
  int l2_cache_bytes = 0;
};

class DeviceContext;
class ModuleImage;

class Device {
 public:
  // The GPU with this ordinal (0: the first), with its primary context current on this thread. Throws
  // twist::Error saying why when there is no usable GPU (see gpu_unavailable_reason()).
  explicit Device(int ordinal = 0);

  const DeviceProperties &properties() const;
  // The architecture to compile kernels for this device with: "sm_90a" for compute capability 9.0 (the
  // arch-specific variant, since the cubin is for this device only), "sm_80" for 8.0.
  std::string arch() const;
  void make_current() const;
  // Waits for all work on the device; throws if any of it failed.
  void synchronize() const;

 private:
  friend class Module;
  friend class DeviceBuffer;
  friend class Timer;
  std::shared_ptr<DeviceContext> context_;
};

// What the driver reports about a loaded kernel (cuFuncGetAttribute).
struct KernelAttributes {
  int registers = 0;
  int static_shared_bytes = 0;
  int local_bytes = 0;  // per thread: spills and stack
  int constant_bytes = 0;
  int max_threads_per_block = 0;     // for this kernel, given its registers
  int max_dynamic_shared_bytes = 0;  // as currently configured
};

// A kernel of a loaded module. It remembers how much dynamic shared memory it has opted into, so launch it
// from one thread at a time (as one would a stream).
class Kernel {
 public:
  const std::string &name() const { return name_; }
  KernelAttributes attributes() const;

  // Launches on the default stream. args[i] points at the i-th kernel parameter (as in cuLaunchKernel).
  // Dynamic shared memory beyond 48 KB is opted into first (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  // more than the device allows is refused before launching. A cluster shape other than 1x1x1 launches the
  // blocks in thread-block clusters of that shape (cuLaunchKernelEx); see check_cluster_shape. With
  // `dependent_launch` (a kernel that waits for its predecessors itself: twist::Kernel::dependent_launch) it
  // is launched with programmatic stream serialization (cuLaunchKernelEx), so that it may start before the
  // kernel before it has finished. Throws when the launch is rejected; a fault while the kernel runs shows up
  // at the next synchronization.
  void launch(Dim3 grid, Dim3 block, unsigned dynamic_shared_bytes, void **args, Dim3 cluster = {},
              bool dependent_launch = false);
  // launch(), then wait for the kernel and throw, naming it, if it failed while running.
  void launch_and_wait(Dim3 grid, Dim3 block, unsigned dynamic_shared_bytes, void **args, Dim3 cluster = {},
                       bool dependent_launch = false);

 private:
  friend class Module;
  Kernel(std::shared_ptr<const ModuleImage> module, CUfunction function, std::string name);
  int attribute(CUfunction_attribute which, const char *what) const;
  std::string describe_launch(Dim3 grid, Dim3 block, unsigned dynamic_shared_bytes, Dim3 cluster) const;

  std::shared_ptr<const ModuleImage> module_;
  CUfunction function_;
  std::string name_;
  int opted_in_dynamic_shared_bytes_;
};

// Throws twist::Error, naming `kernel`, unless blocks can be launched in clusters of this shape: each
// dimension at least 1 and dividing the grid's, and at most 8 blocks per cluster (the portable limit that
// every Hopper part guarantees). Needs no GPU.
void check_cluster_shape(Dim3 grid, Dim3 cluster, std::string_view kernel);

class Module {
 public:
  // Loads a cubin into the device's context. `label` names the module in messages (its program name).
  // When the driver refuses the cubin, the message gives the cubin's architecture and the device's.
  Module(const Device &device, std::span<const char> cubin, std::string label);

  // The kernel with this symbol name (extern "C" kernels have their plain name).
  Kernel kernel(const std::string &name) const;

 private:
  std::shared_ptr<const ModuleImage> image_;
};

class DeviceBuffer {
 public:
  // `bytes` of device memory, uninitialized (fill() it to poison outputs).
  DeviceBuffer(const Device &device, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  size_t size() const { return size_; }
  // The device address, to pass to kernels (take the address of a copy for Kernel::launch's args).
  CUdeviceptr address() const { return address_; }

  // Copies host bytes to the start of the buffer; `bytes` may not exceed size().
  void upload(const void *host, size_t bytes);
  // Copies the first `bytes` of the buffer to the host; waits for work before it on the default stream.
  void download(void *host, size_t bytes) const;
  // Sets every byte to `pattern`, e.g. 0xff (f32 NaN) before a kernel that should overwrite everything.
  void fill(uint8_t pattern);

  template <typename T>
  void upload(const std::vector<T> &host) {
    upload(host.data(), host.size() * sizeof(T));
  }
  // The whole buffer as elements of T; its size must be a multiple of sizeof(T).
  template <typename T>
  std::vector<T> download() const {
    std::vector<T> host(element_count(sizeof(T)));
    download(host.data(), host.size() * sizeof(T));
    return host;
  }

 private:
  size_t element_count(size_t element_bytes) const;
  void release() noexcept;

  std::shared_ptr<DeviceContext> context_;
  CUdeviceptr address_ = 0;
  size_t size_ = 0;
};

// A pair of events on the default stream, for timing the work between start() and stop().
class Timer {
 public:
  explicit Timer(const Device &device);
  ~Timer();
  Timer(const Timer &) = delete;
  Timer &operator=(const Timer &) = delete;

  void start();
  void stop();
  // Waits for the stop event; the time between the two events in milliseconds.
  float elapsed_ms() const;

 private:
  std::shared_ptr<DeviceContext> context_;
  CUevent start_ = nullptr, stop_ = nullptr;
};

}  // namespace twist::cuda
