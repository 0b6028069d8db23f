#pragma once
// What a test that needs a GPU calls first: TWIST_REQUIRE_GPU(). Without a usable GPU it prints
//   SKIPPED: <test case>: no GPU (<reason>)
// and ends the test process with kTestSkippedExitCode, which tests/CMakeLists.txt registers as every test's
// SKIP_RETURN_CODE, so CTest reports the case as skipped rather than passed. CTest runs each case in a
// process of its own; running a GPU test binary by hand on a machine without a GPU stops at the first case.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "backends/cuda/runtime/driver_api.h"

namespace twist::testing {

inline constexpr int kTestSkippedExitCode = 77;

// The name of the test case being run, recorded by the listener below (doctest has no public accessor).
inline std::string &current_test_case() {
  static std::string name;
  return name;
}

struct CurrentTestCaseListener : doctest::IReporter {
  explicit CurrentTestCaseListener(const doctest::ContextOptions &) {}
  void test_case_start(const doctest::TestCaseData &test) override { current_test_case() = test.m_name; }
  void report_query(const doctest::QueryData &) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats &) override {}
  void test_case_reenter(const doctest::TestCaseData &) override {}
  void test_case_end(const doctest::CurrentTestCaseStats &) override {}
  void test_case_exception(const doctest::TestCaseException &) override {}
  void subcase_start(const doctest::SubcaseSignature &) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData &) override {}
  void log_message(const doctest::MessageData &) override {}
  void test_case_skipped(const doctest::TestCaseData &) override {}
};

inline void require_gpu() {
  if (auto reason = cuda::gpu_unavailable_reason()) {
    std::printf("SKIPPED: %s: no GPU (%s)\n", current_test_case().c_str(), reason->c_str());
    std::fflush(stdout);
    std::exit(kTestSkippedExitCode);
  }
}

// For features of newer GPUs (TMA, clusters and wgmma need compute capability 9.0): skips the case, saying
// which device lacks what, when the first GPU's compute capability is below `major`.0.
inline void require_compute_capability(int major, const char *feature) {
  require_gpu();
  const auto &api = cuda::driver();
  CUdevice device;
  int has = 0;
  if (api.cuDeviceGet(&device, 0) != CUDA_SUCCESS ||
      api.cuDeviceGetAttribute(&has, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device) != CUDA_SUCCESS)
    return;  // let the test's own driver calls report the failure
  if (has < major) {
    std::printf("SKIPPED: %s: %s needs compute capability %d.0, the GPU has %d.x\n",
                current_test_case().c_str(), feature, major, has);
    std::fflush(stdout);
    std::exit(kTestSkippedExitCode);
  }
}

}  // namespace twist::testing

// Registering from every file that includes this header is harmless: doctest keeps one listener per name.
REGISTER_LISTENER("twist_current_test_case", 0, twist::testing::CurrentTestCaseListener);

#define TWIST_REQUIRE_GPU() ::twist::testing::require_gpu()
#define TWIST_REQUIRE_COMPUTE_CAPABILITY(major, feature) \
  ::twist::testing::require_compute_capability(major, feature)
