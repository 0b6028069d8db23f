#include <doctest/doctest.h>

#include "backends/cuda/runtime/ptxas_report.h"

using namespace twist::cuda;

// Verbatim from NVRTC 13.0 with --ptxas-options=-v: a spilling extern "C" kernel, a templated (mangled)
// kernel calling a non-inlined device function, and the device function's own properties.
constexpr const char *kSpillingReport =
    R"(ptxas info    : Overriding maximum register limit 256 for '_Z2tkILi3EEvPf' with  32 of maxrregcount option
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'spill' for 'sm_90a'
ptxas info    : Function properties for spill
ptxas         .     880 bytes stack frame, 1060 bytes spill stores, 1296 bytes spill loads
ptxas info    : Used 64 registers, used 0 barriers, 880 bytes cumulative stack size
ptxas info    : Compile time = 180.505 ms
ptxas info    : Compiling entry function '_Z2tkILi3EEvPf' for 'sm_90a'
ptxas info    : Function properties for _Z2tkILi3EEvPf
ptxas         .     256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 256 bytes cumulative stack size
ptxas info    : Compile time = 19.113 ms
ptxas info    : Function properties for _Z6helperPfi
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
)";

// A kernel with static shared memory and a barrier, for sm_80, after a front-end warning.
constexpr const char *kSharedMemoryReport =
    R"(k.cu(3): warning #177-D: variable "unused" was declared but never referenced
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k' for 'sm_80'
ptxas info    : Function properties for k
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 1 barriers, 4000 bytes smem, 360 bytes cmem[0]
ptxas info    : Compile time = 2.675 ms)";

TEST_CASE("parse_ptxas_report reads registers, spills and stack of every kernel, and no device function") {
  std::vector<KernelResources> report = parse_ptxas_report(kSpillingReport);
  REQUIRE(report.size() == 2);
  CHECK(report[0].kernel == "spill");
  CHECK(report[0].registers == 64);
  CHECK(report[0].stack_frame_bytes == 880);
  CHECK(report[0].spill_store_bytes == 1060);
  CHECK(report[0].spill_load_bytes == 1296);
  CHECK(report[0].barriers == 0);
  CHECK(report[0].shared_bytes == 0);
  CHECK(report[1].kernel == "_Z2tkILi3EEvPf");
  CHECK(report[1].registers == 32);
  CHECK(report[1].stack_frame_bytes == 256);
  CHECK(report[1].spill_store_bytes == 0);
  CHECK(!find_kernel(report, "_Z6helperPfi").has_value());
}

TEST_CASE("parse_ptxas_report reads shared and constant memory and barriers, skipping other log lines") {
  std::vector<KernelResources> report = parse_ptxas_report(kSharedMemoryReport);
  REQUIRE(report.size() == 1);
  auto k = find_kernel(report, "k");
  REQUIRE(k.has_value());
  CHECK(k->registers == 8);
  CHECK(k->barriers == 1);
  CHECK(k->shared_bytes == 4000);
  CHECK(k->constant_bytes == 360);
  CHECK(k->spill_store_bytes == 0);
  CHECK(parse_ptxas_report("k.cu(3): warning #177-D: variable \"unused\" was declared").empty());
  CHECK(parse_ptxas_report("").empty());
}
