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
