#include "backends/cuda/runtime/driver.h"

#include <cstdio>
#include <utility>

#include "backends/cuda/runtime/cubin_elf.h"
#include "lang/error.h"

namespace twist::cuda {

namespace {

// Destructors cannot throw, and a failure there usually follows an earlier one that did; it is still
// reported, on stderr, so that a leak or a dead context does not go unnoticed.
void report_cleanup_failure(CUresult result, std::string_view call, std::string_view doing) {
  if (result != CUDA_SUCCESS)
    std::fprintf(stderr, "twist: %s\n", describe_driver_failure(result, call, doing).c_str());
}

int device_attribute(CUdevice device, CUdevice_attribute which, const char *what) {
  int value = 0;
  check(driver().cuDeviceGetAttribute(&value, which, device), "cuDeviceGetAttribute",
        fmt::format("reading the device's {}", what));
  return value;
}

}  // namespace

// The primary context of one device, retained while any object made from the Device is alive.
class DeviceContext {
 public:
  explicit DeviceContext(int ordinal) {
    const DriverApi &api = driver();
    int count = 0;
    check(api.cuDeviceGetCount(&count), "cuDeviceGetCount", "counting devices");
    if (ordinal < 0 || ordinal >= count)
      fail("there is no GPU with ordinal {}: the driver sees {} device(s), numbered from 0", ordinal, count);
    check(api.cuDeviceGet(&device, ordinal), "cuDeviceGet", fmt::format("opening device {}", ordinal));
    check(api.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain",
          fmt::format("retaining the primary context of device {}", ordinal));
    check(api.cuCtxSetCurrent(context), "cuCtxSetCurrent", fmt::format("making device {} current", ordinal));
    char name[256] = {};
    check(api.cuDeviceGetName(name, sizeof(name), device), "cuDeviceGetName", "reading the device's name");
    properties.ordinal = ordinal;
    properties.name = name;
    properties.compute_capability_major =
        device_attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability");
    properties.compute_capability_minor =
        device_attribute(device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability");
    properties.sm_count = device_attribute(device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count");
    properties.max_threads_per_block =
        device_attribute(device, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "threads per block");
    properties.max_shared_memory_per_block =
        device_attribute(device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "shared memory per block");
    properties.max_shared_memory_per_block_optin = device_attribute(
        device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "opt-in shared memory per block");
    properties.l2_cache_bytes = device_attribute(device, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 cache size");
  }
  ~DeviceContext() {
    report_cleanup_failure(driver().cuDevicePrimaryCtxRelease(device), "cuDevicePrimaryCtxRelease",
                           fmt::format("releasing the primary context of device {}", properties.ordinal));
  }
  DeviceContext(const DeviceContext &) = delete;
  DeviceContext &operator=(const DeviceContext &) = delete;

  CUdevice device = 0;
  CUcontext context = nullptr;
  DeviceProperties properties;
};

// A loaded module; kernels hold it so that it is unloaded only after the last of them is gone.
class ModuleImage {
 public:
  ModuleImage(std::shared_ptr<DeviceContext> owner, CUmodule loaded, std::string name)
      : context(std::move(owner)), module(loaded), label(std::move(name)) {}
  ~ModuleImage() {
    report_cleanup_failure(driver().cuModuleUnload(module), "cuModuleUnload",
                           fmt::format("unloading module '{}'", label));
  }
  ModuleImage(const ModuleImage &) = delete;
  ModuleImage &operator=(const ModuleImage &) = delete;

  std::shared_ptr<DeviceContext> context;
  CUmodule module;
  std::string label;
};

Device::Device(int ordinal) : context_(std::make_shared<DeviceContext>(ordinal)) {}

const DeviceProperties &Device::properties() const {
  return context_->properties;
}

std::string Device::arch() const {
  const DeviceProperties &p = properties();
  // Every compute capability from 9.0 on has an arch-specific variant ("a") with the features only that
  // chip has (wgmma and setmaxnreg on 9.0); a cubin built for this very device may use them.
  return fmt::format("sm_{}{}{}", p.compute_capability_major, p.compute_capability_minor,
                     p.compute_capability_major >= 9 ? "a" : "");
}

void Device::make_current() const {
  check(driver().cuCtxSetCurrent(context_->context), "cuCtxSetCurrent",
        fmt::format("making device {} current on this thread", properties().ordinal));
}

void Device::synchronize() const {
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize",
        fmt::format("waiting for the work queued on device {}", properties().ordinal));
}

Module::Module(const Device &device, std::span<const char> cubin, std::string label) {
  CubinInfo info = read_cubin_info(cubin);
  CUmodule module = nullptr;
  CUresult loaded = driver().cuModuleLoadData(&module, cubin.data());
  if (loaded != CUDA_SUCCESS) {
    const DeviceProperties &p = device.properties();
    throw Error(fmt::format(
        "{} The cubin holds SASS for sm_{}; the device {} is compute capability {}.{} "
        "(compile for {}).",
        describe_driver_failure(loaded, "cuModuleLoadData", fmt::format("loading module '{}'", label)),
        info.sm, p.name, p.compute_capability_major, p.compute_capability_minor, device.arch()));
  }
  image_ = std::make_shared<const ModuleImage>(device.context_, module, std::move(label));
}

Kernel Module::kernel(const std::string &name) const {
  CUfunction function = nullptr;
  check(driver().cuModuleGetFunction(&function, image_->module, name.c_str()), "cuModuleGetFunction",
        fmt::format("looking up kernel '{}' in module '{}'", name, image_->label));
  return Kernel(image_, function, name);
}

Kernel::Kernel(std::shared_ptr<const ModuleImage> module, CUfunction function, std::string name)
    : module_(std::move(module)), function_(function), name_(std::move(name)) {
  opted_in_dynamic_shared_bytes_ =
      attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, "dynamic shared memory limit");
}

int Kernel::attribute(CUfunction_attribute which, const char *what) const {
  int value = 0;
  check(driver().cuFuncGetAttribute(&value, which, function_), "cuFuncGetAttribute",
        fmt::format("reading the {} of kernel '{}'", what, name_));
  return value;
}

KernelAttributes Kernel::attributes() const {
  return {
      .registers = attribute(CU_FUNC_ATTRIBUTE_NUM_REGS, "register count"),
      .static_shared_bytes = attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "static shared memory"),
      .local_bytes = attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "local memory"),
      .constant_bytes = attribute(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, "constant memory"),
      .max_threads_per_block = attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "thread limit"),
      .max_dynamic_shared_bytes =
          attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, "dynamic shared memory limit"),
  };
}

std::string Kernel::describe_launch(Dim3 grid, Dim3 block, unsigned dynamic_shared_bytes,
                                    Dim3 cluster) const {
  const bool clustered = cluster.x * cluster.y * cluster.z != 1;
  return fmt::format(
      "kernel '{}' of module '{}' (grid {}x{}x{}, block {}x{}x{}, {} bytes of dynamic shared "
      "memory{})",
      name_, module_->label, grid.x, grid.y, grid.z, block.x, block.y, block.z, dynamic_shared_bytes,
      clustered ? fmt::format(", clusters of {}x{}x{} blocks", cluster.x, cluster.y, cluster.z) : "");
}

void check_cluster_shape(Dim3 grid, Dim3 cluster, std::string_view kernel) {
  const unsigned grid_dims[] = {grid.x, grid.y, grid.z}, cluster_dims[] = {cluster.x, cluster.y, cluster.z};
  for (int d = 0; d < 3; ++d)
    if (cluster_dims[d] == 0 || grid_dims[d] % cluster_dims[d] != 0)
      fail(
          "kernel '{}': a grid of {}x{}x{} blocks cannot be launched in clusters of {}x{}x{}: dimension {} "
          "of "
          "the cluster must be at least 1 and divide the grid's; round the grid up to whole clusters",
          kernel, grid.x, grid.y, grid.z, cluster.x, cluster.y, cluster.z, "xyz"[d]);
  if (cluster.x * cluster.y * cluster.z > 8)
    fail(
        "kernel '{}': clusters of {}x{}x{} blocks exceed the portable limit of 8 blocks per cluster; use a "
        "cluster of at most 8 blocks",
        kernel, cluster.x, cluster.y, cluster.z);
}

void Kernel::launch(Dim3 grid, Dim3 block, unsigned dynamic_shared_bytes, void **args, Dim3 cluster,
                    bool dependent_launch) {
  const DriverApi &api = driver();
  const std::string launch = describe_launch(grid, block, dynamic_shared_bytes, cluster);
  const bool clustered = cluster.x * cluster.y * cluster.z != 1;
  if (clustered) check_cluster_shape(grid, cluster, name_);
  if (static_cast<int64_t>(dynamic_shared_bytes) > opted_in_dynamic_shared_bytes_) {
    const DeviceProperties &device = module_->context->properties;
    int static_bytes = attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "static shared memory");
    if (static_cast<int64_t>(dynamic_shared_bytes) + static_bytes > device.max_shared_memory_per_block_optin)
      fail(
          "{} needs {} bytes of shared memory per block ({} static and {} dynamic), but {} allows at most "
          "{}; "
          "use smaller tiles or fewer pipeline stages",
          launch, static_bytes + int64_t{dynamic_shared_bytes}, static_bytes, dynamic_shared_bytes,
          device.name, device.max_shared_memory_per_block_optin);
    check(api.cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 static_cast<int>(dynamic_shared_bytes)),
          "cuFuncSetAttribute",
          fmt::format("opting kernel '{}' into {} bytes of dynamic shared memory", name_,
                      dynamic_shared_bytes));
    opted_in_dynamic_shared_bytes_ = static_cast<int>(dynamic_shared_bytes);
  }
  if (!clustered && !dependent_launch) {
    check(
        api.cuLaunchKernel(function_, grid.x, grid.y, grid.z, block.x, block.y, block.z, dynamic_shared_bytes,
                           /*hStream=*/nullptr, args, /*extra=*/nullptr),
        "cuLaunchKernel", "launching " + launch);
    return;
  }
  if (api.cuLaunchKernelEx == nullptr)
    fail(
        "{} cannot be launched: the CUDA driver does not export cuLaunchKernelEx, which cluster and "
        "dependent launches need (CUDA 12); update the driver or lower the kernel for sm_80",
        launch);
  CUlaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (clustered) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attributes[count].value.clusterDim.x = cluster.x;
    attributes[count].value.clusterDim.y = cluster.y;
    attributes[count++].value.clusterDim.z = cluster.z;
  }
  if (dependent_launch) {
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attributes[count++].value.programmaticStreamSerializationAllowed = 1;
  }
  CUlaunchConfig config{};
  config.gridDimX = grid.x;
  config.gridDimY = grid.y;
  config.gridDimZ = grid.z;
  config.blockDimX = block.x;
  config.blockDimY = block.y;
  config.blockDimZ = block.z;
  config.sharedMemBytes = dynamic_shared_bytes;
  config.attrs = attributes;
  config.numAttrs = count;
  check(api.cuLaunchKernelEx(&config, function_, args, /*extra=*/nullptr), "cuLaunchKernelEx",
        "launching " + launch);
}

void Kernel::launch_and_wait(Dim3 grid, Dim3 block, unsigned dynamic_shared_bytes, void **args, Dim3 cluster,
                             bool dependent_launch) {
  launch(grid, block, dynamic_shared_bytes, args, cluster, dependent_launch);
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize",
        "running " + describe_launch(grid, block, dynamic_shared_bytes, cluster));
}

DeviceBuffer::DeviceBuffer(const Device &device, size_t bytes) : context_(device.context_), size_(bytes) {
  if (bytes == 0) return;
  check(driver().cuMemAlloc(&address_, bytes), "cuMemAlloc",
        fmt::format("allocating {} bytes on {}", bytes, device.properties().name));
}

DeviceBuffer::~DeviceBuffer() {
  release();
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : context_(std::move(other.context_)),
      address_(std::exchange(other.address_, 0)),
      size_(std::exchange(other.size_, 0)) {}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    release();
    context_ = std::move(other.context_);
    address_ = std::exchange(other.address_, 0);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  if (address_ != 0)
    report_cleanup_failure(driver().cuMemFree(address_), "cuMemFree",
                           fmt::format("freeing a device buffer of {} bytes", size_));
  address_ = 0;
}

void DeviceBuffer::upload(const void *host, size_t bytes) {
  if (bytes > size_)
    fail("cannot upload {} bytes into a device buffer of {} bytes; allocate a larger buffer", bytes, size_);
  if (bytes == 0) return;
  check(driver().cuMemcpyHtoD(address_, host, bytes), "cuMemcpyHtoD",
        fmt::format("uploading {} bytes to a device buffer", bytes));
}

void DeviceBuffer::download(void *host, size_t bytes) const {
  if (bytes > size_)
    fail("cannot download {} bytes from a device buffer of {} bytes; ask for at most its size", bytes, size_);
  if (bytes == 0) return;
  check(driver().cuMemcpyDtoH(host, address_, bytes), "cuMemcpyDtoH",
        fmt::format("downloading {} bytes from a device buffer", bytes));
}

void DeviceBuffer::fill(uint8_t pattern) {
  if (size_ == 0) return;
  check(driver().cuMemsetD8(address_, pattern, size_), "cuMemsetD8",
        fmt::format("filling a device buffer of {} bytes with 0x{:02x}", size_, pattern));
}

size_t DeviceBuffer::element_count(size_t element_bytes) const {
  if (size_ % element_bytes != 0)
    fail(
        "a device buffer of {} bytes does not hold whole elements of {} bytes; download it as bytes or with "
        "the element type it was allocated for",
        size_, element_bytes);
  return size_ / element_bytes;
}

Timer::Timer(const Device &device) : context_(device.context_) {
  const DriverApi &api = driver();
  check(api.cuEventCreate(&start_, CU_EVENT_DEFAULT), "cuEventCreate", "creating a timer's start event");
  check(api.cuEventCreate(&stop_, CU_EVENT_DEFAULT), "cuEventCreate", "creating a timer's stop event");
}

Timer::~Timer() {
  for (CUevent event : {start_, stop_})
    if (event != nullptr)
      report_cleanup_failure(driver().cuEventDestroy(event), "cuEventDestroy", "destroying a timer's event");
}

void Timer::start() {
  check(driver().cuEventRecord(start_, nullptr), "cuEventRecord", "starting a timer");
}

void Timer::stop() {
  check(driver().cuEventRecord(stop_, nullptr), "cuEventRecord", "stopping a timer");
}

float Timer::elapsed_ms() const {
  const DriverApi &api = driver();
  check(api.cuEventSynchronize(stop_), "cuEventSynchronize", "waiting for a timer's stop event");
  float ms = 0;
  check(api.cuEventElapsedTime(&ms, start_, stop_), "cuEventElapsedTime",
        "reading a timer (were start() and stop() both called?)");
  return ms;
}

}  // namespace twist::cuda
