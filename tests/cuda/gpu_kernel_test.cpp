// Kernels compiled by NVRTC and launched through the driver, checked against host loops on random data.
// Without a GPU, each case is reported skipped (see tests/gpu_support.h).
#include <doctest/doctest.h>

#include <bit>
#include <random>

#include "backends/cuda/runtime/driver.h"
#include "backends/cuda/runtime/kernel_cache.h"
#include "lang/error.h"
#include "tests/cuda/test_kernels.h"
#include "tests/gpu_support.h"

using namespace twist;
using namespace twist::cuda;

namespace {

unsigned blocks_for(int n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

// The f16 and bf16 encodings of small integers, which both formats hold exactly.
uint16_t f16_of_small_integer(int value) {
  if (value == 0) return 0;
  uint32_t f32 = std::bit_cast<uint32_t>(static_cast<float>(value));
  uint32_t sign = f32 >> 31, exponent = (f32 >> 23) & 0xff, mantissa = f32 & 0x7fffff;
  return static_cast<uint16_t>(sign << 15 | (exponent - 127 + 15) << 10 | mantissa >> 13);
}
float f32_of_bf16(uint16_t bits) {
  return std::bit_cast<float>(uint32_t{bits} << 16);
}

}  // namespace

TEST_CASE("scale_add writes a[i] = 2 * b[i] + i for every i, through the kernel cache") {
  TWIST_REQUIRE_GPU();
  Device device;
  CompileResult compiled =
      default_kernel_cache().compile(test_kernels::kScaleAdd, "scale_add.cu", {.arch = device.arch()});
  Module module(device, compiled.cubin, "scale_add.cu");
  Kernel kernel = module.kernel("scale_add");
  // The driver and ptxas agree on the register count the scheduler will budget with.
  REQUIRE(compiled.resources.size() == 1);
  CHECK(kernel.attributes().registers == compiled.resources[0].registers);

  int n = (1 << 20) + 37;  // not a multiple of the block size: the tail is guarded
  std::mt19937 random(std::random_device{}());
  std::uniform_real_distribution<float> values(-100.0f, 100.0f);
  std::vector<float> b(n);
  for (float &x : b) x = values(random);
  DeviceBuffer a_device(device, n * sizeof(float)), b_device(device, n * sizeof(float));
  a_device.fill(0xff);  // NaN everywhere, so an element the kernel skips cannot pass
  b_device.upload(b);
  CUdeviceptr a_address = a_device.address(), b_address = b_device.address();
  void *args[] = {&a_address, &b_address, &n};
  kernel.launch_and_wait({blocks_for(n, 256)}, {256}, 0, args);

  std::vector<float> a = a_device.download<float>();
  int mismatches = 0, first_mismatch = -1;
  for (int i = 0; i < n; ++i)
    if (a[i] != 2.0f * b[i] + static_cast<float>(i) && mismatches++ == 0) first_mismatch = i;
  INFO("first mismatch at ", first_mismatch);
  CHECK(mismatches == 0);
}

TEST_CASE("the cp.async + ldmatrix + mma.sync tile computes A * B exactly, in f32 and bf16") {
  TWIST_REQUIRE_GPU();
  Device device;
  Module module(
      device, compile_to_cubin(test_kernels::kTensorCoreTile, "tensor_core_tile.cu", {.arch = device.arch()}),
      "tensor_core_tile.cu");
  Kernel kernel = module.kernel("tensor_core_tile");

  // Small integers: every product and sum is exact in f32 (and the sums, at most 144, in bf16).
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> values(-3, 3);
  std::vector<int> a(16 * 16), b(16 * 8);
  for (int &x : a) x = values(random);
  for (int &x : b) x = values(random);
  std::vector<uint16_t> a_f16(a.size()), b_f16(b.size());
  std::transform(a.begin(), a.end(), a_f16.begin(), f16_of_small_integer);
  std::transform(b.begin(), b.end(), b_f16.begin(), f16_of_small_integer);

  DeviceBuffer a_device(device, a_f16.size() * 2), b_device(device, b_f16.size() * 2);
  DeviceBuffer c_device(device, 16 * 8 * sizeof(float)), c_bf16_device(device, 16 * 8 * 2);
  a_device.upload(a_f16);
  b_device.upload(b_f16);
  c_device.fill(0xff);
  c_bf16_device.fill(0xff);
  CUdeviceptr addresses[] = {a_device.address(), b_device.address(), c_device.address(),
                             c_bf16_device.address()};
  void *args[] = {&addresses[0], &addresses[1], &addresses[2], &addresses[3]};
  kernel.launch_and_wait({1}, {32}, 0, args);

  std::vector<float> c = c_device.download<float>();
  std::vector<uint16_t> c_bf16 = c_bf16_device.download<uint16_t>();
  int mismatches = 0;
  for (int row = 0; row < 16; ++row)
    for (int col = 0; col < 8; ++col) {
      int expected = 0;
      for (int k = 0; k < 16; ++k) expected += a[row * 16 + k] * b[k * 8 + col];
      if (c[row * 8 + col] != static_cast<float>(expected) ||
          f32_of_bf16(c_bf16[row * 8 + col]) != static_cast<float>(expected)) {
        if (mismatches++ < 4)
          MESSAGE("C[", row, "][", col, "] is ", c[row * 8 + col], " (bf16 ",
                  f32_of_bf16(c_bf16[row * 8 + col]), "), expected ", expected);
      }
    }
  CHECK(mismatches == 0);
}

TEST_CASE("a launch with more than 48 KB of dynamic shared memory uses all of it") {
  TWIST_REQUIRE_GPU();
  Device device;
  Module module(device,
                compile_to_cubin(test_kernels::kReverseThroughShared, "reverse.cu", {.arch = device.arch()}),
                "reverse.cu");
  Kernel kernel = module.kernel("reverse_through_shared");
  const unsigned shared_bytes = device.properties().max_shared_memory_per_block_optin;
  REQUIRE(shared_bytes > 48 * 1024);
  int words = static_cast<int>(shared_bytes / 4);

  std::mt19937 random(std::random_device{}());
  std::vector<uint32_t> in(words);
  for (uint32_t &x : in) x = static_cast<uint32_t>(random());
  DeviceBuffer in_device(device, words * 4), out_device(device, words * 4);
  in_device.upload(in);
  out_device.fill(0);
  CUdeviceptr in_address = in_device.address(), out_address = out_device.address();
  void *args[] = {&in_address, &out_address, &words};
  kernel.launch_and_wait({1}, {1024}, shared_bytes, args);
  CHECK(kernel.attributes().max_dynamic_shared_bytes == static_cast<int>(shared_bytes));

  std::vector<uint32_t> out = out_device.download<uint32_t>();
  std::reverse(in.begin(), in.end());
  CHECK(out == in);

  std::string refusal = fmt::format("allows at most {}", shared_bytes);
  CHECK_THROWS_WITH_AS(kernel.launch({1}, {1024}, shared_bytes + 4, args), doctest::Contains(refusal.c_str()),
                       Error);
}

TEST_CASE("a launch the driver rejects is an error naming the kernel and its configuration") {
  TWIST_REQUIRE_GPU();
  Device device;
  Module module(device, compile_to_cubin(test_kernels::kScaleAdd, "scale_add.cu", {.arch = device.arch()}),
                "scale_add.cu");
  Kernel kernel = module.kernel("scale_add");
  DeviceBuffer a(device, 4), b(device, 4);
  CUdeviceptr a_address = a.address(), b_address = b.address();
  int n = 1;
  void *args[] = {&a_address, &b_address, &n};
  CHECK_THROWS_WITH_AS(
      kernel.launch({1}, {4096}, 0, args),
      doctest::Contains("cuLaunchKernel failed while launching kernel 'scale_add' of module "
                        "'scale_add.cu' (grid 1x1x1, block 4096x1x1, 0 bytes of dynamic shared "
                        "memory): CUDA_ERROR_INVALID_VALUE"),
      Error);
  // The rejection is not sticky: the same kernel still runs.
  kernel.launch_and_wait({1}, {32}, 0, args);
}

// A fault leaves the context unusable for the rest of the process: CTest runs this case in its own.
TEST_CASE("a kernel that faults is reported by launch_and_wait with its name") {
  TWIST_REQUIRE_GPU();
  Device device;
  Module module(device,
                compile_to_cubin(test_kernels::kWriteThrough, "write_through.cu", {.arch = device.arch()}),
                "write_through.cu");
  Kernel kernel = module.kernel("write_through");
  CUdeviceptr null_pointer = 0;
  void *args[] = {&null_pointer};
  CHECK_THROWS_WITH_AS(
      kernel.launch_and_wait({1}, {32}, 0, args),
      doctest::Contains("cuCtxSynchronize failed while running kernel 'write_through' of module "
                        "'write_through.cu'"),
      Error);
}
