#include <doctest/doctest.h>

#include "backends/cuda/runtime/driver.h"
#include "lang/error.h"

using namespace twist;
using namespace twist::cuda;

TEST_CASE("a driver library that cannot be loaded is a reason, not a crash") {
  DriverLoad load = load_driver("libtwist-no-such-driver.so.1");
  CHECK(!load.api.has_value());
  CHECK(load.unavailable_reason.find("libtwist-no-such-driver.so.1 cannot be loaded") != std::string::npos);
}

TEST_CASE("a library without the driver's functions is a reason naming what it lacks") {
  DriverLoad load = load_driver("libm.so.6");
  CHECK(!load.api.has_value());
  CHECK(load.unavailable_reason.find("lacks functions twist needs (cuInit cuGetErrorName") !=
        std::string::npos);
  CHECK(load.unavailable_reason.find("cuMemAlloc_v2") != std::string::npos);  // the versioned entry points
  CHECK(load.unavailable_reason.find("cuEventElapsedTime_v2") != std::string::npos);
}

TEST_CASE("the toolkit's stub driver resolves every function and then fails cuInit with its error name") {
  // The stub exports the whole API (cuTensorMapEncodeTiled included) but is no driver.
  DriverLoad load = load_driver(TWIST_CUDA_STUB_DRIVER);
  CHECK(!load.api.has_value());
  CHECK(load.unavailable_reason.find("cuInit failed with CUDA_ERROR_STUB_LIBRARY") != std::string::npos);
}

TEST_CASE("gpu_unavailable_reason and Device agree about whether there is a GPU") {
  if (std::optional<std::string> reason = gpu_unavailable_reason()) {
    CHECK(!reason->empty());
    CHECK_THROWS_WITH_AS(Device(), doctest::Contains(("no usable GPU: " + *reason).c_str()), Error);
  } else {
    Device device;
    CHECK(device.properties().sm_count > 0);
  }
}

TEST_CASE("cluster shapes that do not divide the grid or exceed 8 blocks are refused before launching") {
  CHECK_NOTHROW(check_cluster_shape({132, 2, 1}, {2, 1, 1}, "k"));
  CHECK_NOTHROW(check_cluster_shape({8, 4, 1}, {4, 2, 1}, "k"));
  CHECK_THROWS_WITH_AS(
      check_cluster_shape({7, 1, 1}, {2, 1, 1}, "gemm"),
      doctest::Contains("kernel 'gemm': a grid of 7x1x1 blocks cannot be launched in clusters of "
                        "2x1x1: dimension x of the cluster must be at least 1 and divide"),
      Error);
  CHECK_THROWS_WITH_AS(check_cluster_shape({8, 8, 1}, {1, 0, 1}, "gemm"), doctest::Contains("dimension y"),
                       Error);
  CHECK_THROWS_WITH_AS(check_cluster_shape({16, 16, 1}, {4, 4, 1}, "gemm"),
                       doctest::Contains("clusters of 4x4x1 blocks exceed the portable limit of 8"), Error);
}
