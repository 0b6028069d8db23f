#include <doctest/doctest.h>

#include <algorithm>

#include "backends/cuda/runtime/cubin_elf.h"
#include "backends/cuda/runtime/nvrtc_compiler.h"
#include "lang/error.h"
#include "tests/cuda/test_kernels.h"
#include "tests/error_capture.h"

using twist::testing::contains;
using twist::testing::error_of;

using namespace twist;
using namespace twist::cuda;

TEST_CASE(
    "the tensor-core tile kernel (f16, bf16, cp.async, ldmatrix, mma.sync) compiles for sm_80 and sm_90a") {
  for (auto [arch, sm] :
       {std::pair<std::string, int>{"sm_80", 80}, std::pair<std::string, int>{"sm_90a", 90}}) {
    CAPTURE(arch);
    CompileResult result = compile(test_kernels::kTensorCoreTile, "tensor_core_tile.cu", {.arch = arch});
    INFO("NVRTC's log:\n", result.log);
    const std::vector<char> &cubin = result.cubin;
    REQUIRE(cubin.size() > 64);
    CHECK(std::equal(cubin.begin(), cubin.begin() + 4,
                     "\x7f"
                     "ELF"));
    CubinInfo info = read_cubin_info(cubin);
    CHECK(info.sm == sm);
    CHECK(info.has_section(".text.tensor_core_tile"));
    // ptxas' report came back through NVRTC and was parsed.
    std::optional<KernelResources> resources = find_kernel(result.resources, "tensor_core_tile");
    REQUIRE(resources.has_value());
    CHECK(resources->registers > 0);
    CHECK(resources->shared_bytes == test_kernels::kTensorCoreTileSharedBytes);
    CHECK(resources->barriers == 1);
    CHECK(resources->spill_store_bytes == 0);
    CHECK(contains(result.log, "Compiling entry function 'tensor_core_tile' for '" + arch + "'"));
  }
}

// With a driver installed, NVRTC's own cache (in the driver's compute cache) used to swallow the report of
// a repeated compile; on a machine without a driver this passes either way.
TEST_CASE("compiling the same source again reports its resources again") {
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    CompileResult result = compile(test_kernels::kScaleAdd, "scale_add.cu", {.arch = "sm_90a"});
    std::optional<KernelResources> resources = find_kernel(result.resources, "scale_add");
    REQUIRE(resources.has_value());
    CHECK(resources->registers > 0);
  }
}

TEST_CASE("wgmma compiles for sm_90a, and plain sm_90 refuses it with ptxas' message") {
  CompileResult result = compile(test_kernels::kWgmmaFence, "wgmma_fence.cu", {.arch = "sm_90a"});
  CHECK(read_cubin_info(result.cubin).sm == 90);
  CHECK(find_kernel(result.resources, "wgmma_fence").has_value());

  std::string error =
      error_of([] { compile(test_kernels::kWgmmaFence, "wgmma_fence.cu", {.arch = "sm_90"}); });
  CHECK(contains(error, "could not compile 'wgmma_fence.cu' for sm_90"));
  CHECK(contains(error, "Instruction 'wgmma.fence' not supported on .target 'sm_90'"));
}

TEST_CASE("a syntax error throws with NVRTC's log and the offending source line") {
  const std::string source =
      "extern \"C\" __global__ void broken(float *out) {\n"
      "  float fine = 1.0f;\n"
      "  float missing = ;\n"
      "  out[0] = fine + missing;\n"
      "}\n";
  std::string error = error_of([&] { compile(source, "broken.cu", {.arch = "sm_90a"}); });
  CHECK(contains(error, "could not compile 'broken.cu' for sm_90a: NVRTC_ERROR_COMPILATION"));
  CHECK(contains(error, "broken.cu(3): error: expected an expression"));
  CHECK(contains(error, ">     3 |   float missing = ;"));
  CHECK(contains(error, "      2 |   float fine = 1.0f;"));
  CHECK(contains(error, "--gpu-architecture=sm_90a"));
}

TEST_CASE("headers come from the toolkit, fast math is off unless asked for, line info only when asked") {
  CHECK(std::filesystem::exists(cuda_include_directory() / "cuda_fp16.h"));
  CHECK(std::filesystem::exists(cuda_include_directory() / "cuda_bf16.h"));

  // NVRTC defines __USE_FAST_MATH__ to 1 under --use_fast_math and to 0 otherwise.
  const std::string refuses_fast_math =
      "#if __USE_FAST_MATH__\n#error fast math is on\n#endif\n"
      "extern \"C\" __global__ void exact(float *x) { x[0] = expf(x[0]); }\n";
  CHECK(!compile(refuses_fast_math, "exact.cu", {.arch = "sm_80"}).cubin.empty());
  std::string error = error_of(
      [&] { compile(refuses_fast_math, "exact.cu", {.arch = "sm_80", .extra = {"--use_fast_math"}}); });
  CHECK(contains(error, "fast math is on"));

  CompileResult plain = compile(test_kernels::kScaleAdd, "scale_add.cu", {.arch = "sm_90a"});
  CompileResult with_lines =
      compile(test_kernels::kScaleAdd, "scale_add.cu", {.arch = "sm_90a", .line_info = true});
  CHECK(!read_cubin_info(plain.cubin).has_section(".nv_debug_line_sass"));
  CHECK(read_cubin_info(with_lines.cubin).has_section(".nv_debug_line_sass"));
}

TEST_CASE(
    "nvrtc_options spells out the architecture, C++17, the header path, ptxas -v, no NVRTC cache, and extras "
    "last") {
  std::vector<std::string> options =
      nvrtc_options({.arch = "sm_90a", .line_info = true, .extra = {"-DTILE=64", "-maxrregcount=128"}});
  // clang-format off
  std::vector<std::string> expected = {
      "--gpu-architecture=sm_90a",
      "-std=c++17",
      "--include-path=" + cuda_include_directory().string(),
      "--ptxas-options=-v",
      "--no-cache",
      "-lineinfo",
      "-DTILE=64",
      "-maxrregcount=128",
  };
  // clang-format on
  CHECK(options == expected);
  std::vector<std::string> plain = nvrtc_options({.arch = "sm_80"});
  CHECK(std::find(plain.begin(), plain.end(), "-lineinfo") == plain.end());
}

TEST_CASE("bad options are refused before or by NVRTC, with what to do") {
  CHECK(contains(error_of([] { nvrtc_options({}); }), "CompileOptions.arch is empty"));
  CHECK(contains(error_of([] { nvrtc_options({.arch = "compute_90"}); }), "'compute_90' is not a real GPU"));
  std::string error = error_of([] {
    compile(test_kernels::kScaleAdd, "scale_add.cu", {.arch = "sm_90a", .extra = {"--no-such-option"}});
  });
  CHECK(contains(error, "NVRTC_ERROR_INVALID_OPTION"));
  CHECK(contains(error, "--no-such-option"));
  CHECK(contains(error, "this NVRTC compiles for sm_"));
  CHECK(contains(error, "sm_90"));
}

TEST_CASE("sm_number reads real architectures and refuses everything else") {
  CHECK(sm_number("sm_80") == 80);
  CHECK(sm_number("sm_90a") == 90);
  CHECK(sm_number("sm_100f") == 100);
  for (const char *bad : {"compute_90", "sm_", "sm_90x", "90", "", "sm_-1"}) {
    CAPTURE(bad);
    CHECK(contains(error_of([&] { sm_number(bad); }), "is not a real GPU architecture"));
  }
}

TEST_CASE("nvrtc_version reports the loaded library") {
  CHECK(nvrtc_version().starts_with("13."));
}
