// Driver wrappers on a real GPU. Without one, each case is reported skipped (see tests/gpu_support.h).
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "backends/cuda/runtime/driver.h"
#include "backends/cuda/runtime/nvrtc_compiler.h"
#include "lang/error.h"
#include "tests/cuda/test_kernels.h"
#include "tests/gpu_support.h"

using namespace twist;
using namespace twist::cuda;

TEST_CASE("the device reports sane properties and the architecture to compile for") {
  TWIST_REQUIRE_GPU();
  Device device;
  const DeviceProperties &p = device.properties();
  MESSAGE(p.name, " compute capability ", p.compute_capability_major, ".", p.compute_capability_minor, ", ",
          p.sm_count, " SMs, ", p.max_shared_memory_per_block_optin, " bytes opt-in shared memory, ",
          p.l2_cache_bytes, " bytes L2");
  CHECK(!p.name.empty());
  CHECK(p.compute_capability_major * 10 + p.compute_capability_minor >= 80);
  CHECK(p.sm_count > 0);
  CHECK(p.max_threads_per_block >= 1024);
  CHECK(p.max_shared_memory_per_block == 48 * 1024);
  CHECK(p.max_shared_memory_per_block_optin > p.max_shared_memory_per_block);
  CHECK(p.l2_cache_bytes > 0);
  CHECK(sm_number(device.arch()) == p.compute_capability_major * 10 + p.compute_capability_minor);
  CHECK(device.arch().ends_with(
      p.compute_capability_major >= 9 ? "a" : std::to_string(p.compute_capability_minor)));
}

TEST_CASE("a device buffer round-trips bytes, and fill poisons every byte") {
  TWIST_REQUIRE_GPU();
  Device device;
  const size_t bytes = (1 << 20) + 3;
  DeviceBuffer buffer(device, bytes);
  CHECK(buffer.size() == bytes);
  CHECK(buffer.address() != 0);

  buffer.fill(0xa5);
  std::vector<uint8_t> poisoned = buffer.download<uint8_t>();
  CHECK(std::count(poisoned.begin(), poisoned.end(), 0xa5) == static_cast<long>(bytes));

  std::mt19937 random(std::random_device{}());
  std::vector<uint8_t> data(bytes);
  for (uint8_t &b : data) b = static_cast<uint8_t>(random());
  buffer.upload(data);
  CHECK(buffer.download<uint8_t>() == data);

  // A partial upload leaves the rest as it was.
  buffer.fill(0x5a);
  buffer.upload(data.data(), 10);
  std::vector<uint8_t> partial = buffer.download<uint8_t>();
  CHECK(std::equal(partial.begin(), partial.begin() + 10, data.begin()));
  CHECK(std::count(partial.begin() + 10, partial.end(), 0x5a) == static_cast<long>(bytes - 10));

  CHECK_THROWS_WITH_AS(buffer.upload(std::vector<uint8_t>(bytes + 1)), doctest::Contains("allocate a larger"),
                       Error);
  CHECK_THROWS_WITH_AS(buffer.download<float>(), doctest::Contains("does not hold whole elements of 4 bytes"),
                       Error);

  DeviceBuffer moved = std::move(buffer);
  CHECK(moved.size() == bytes);
  CHECK(buffer.size() == 0);
  CHECK(moved.download<uint8_t>() == partial);
}

TEST_CASE("a cubin for another architecture is refused with both architectures named") {
  TWIST_REQUIRE_GPU();
  Device device;
  std::string other = sm_number(device.arch()) >= 90 ? "sm_80" : "sm_90a";
  std::vector<char> cubin = compile_to_cubin(test_kernels::kScaleAdd, "scale_add.cu", {.arch = other});
  try {
    Module module(device, cubin, "scale_add.cu");
    FAIL("the driver loaded a cubin for ", other, " on ", device.arch());
  } catch (const Error &e) {
    std::string message = e.what();
    CHECK(message.find("cuModuleLoadData failed while loading module 'scale_add.cu'") != std::string::npos);
    CHECK(message.find("SASS for " + other.substr(0, 5)) != std::string::npos);
    CHECK(message.find("compile for " + device.arch()) != std::string::npos);
  }
}

TEST_CASE("looking up a kernel the module lacks names it") {
  TWIST_REQUIRE_GPU();
  Device device;
  Module module(device, compile_to_cubin(test_kernels::kScaleAdd, "scale_add.cu", {.arch = device.arch()}),
                "scale_add.cu");
  CHECK_THROWS_WITH_AS(module.kernel("no_such_kernel"),
                       doctest::Contains("looking up kernel 'no_such_kernel' in module 'scale_add.cu': "
                                         "CUDA_ERROR_NOT_FOUND"),
                       Error);
}

TEST_CASE("a timer measures the work between its events") {
  TWIST_REQUIRE_GPU();
  Device device;
  Module module(device, compile_to_cubin(test_kernels::kScaleAdd, "scale_add.cu", {.arch = device.arch()}),
                "scale_add.cu");
  Kernel kernel = module.kernel("scale_add");
  int n = 1 << 24;
  DeviceBuffer a(device, n * sizeof(float)), b(device, n * sizeof(float));
  b.fill(0);
  CUdeviceptr a_address = a.address(), b_address = b.address();
  void *args[] = {&a_address, &b_address, &n};
  Timer timer(device);
  timer.start();
  kernel.launch({static_cast<unsigned>(n / 256)}, {256}, 0, args);
  timer.stop();
  float ms = timer.elapsed_ms();
  MESSAGE("scale_add over ", n, " floats: ", ms, " ms");
  CHECK(std::isfinite(ms));
  CHECK(ms > 0.0f);
}
