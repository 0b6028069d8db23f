// GpuProgram::time on a real GEMM: as many samples as asked, each a positive time, the median among them,
// and the program's results still right afterwards (timing reuses the bound buffers, not the results).
#include <doctest/doctest.h>

#include <algorithm>

#include "apps/gemm/gemm.h"
#include "backends/cuda/program/gpu_program.h"
#include "backends/reference/evaluate_funcs.h"
#include "scheduler/lower.h"
#include "tests/gpu_support.h"

using namespace twist;
using namespace twist::apps;

TEST_CASE(
    "GPU: GpuProgram::time gives the median of the timed runs of a GEMM and run() still matches the "
    "oracle") {
  TWIST_REQUIRE_GPU();
  cuda::Device device;
  const Gemm g = make_gemm({.input = f16, .output = f32});
  const LoweredProgram p = lower(g.out, schedule_tensor_core(g, GemmTiling{}), Target::sm90a());
  cuda::GpuProgram gpu(p, device);
  const reference::HostTensor a = reference::random_normal(f16, {512, 256}, 1);
  const reference::HostTensor b = reference::random_normal(f16, {256, 384}, 2);
  const cuda::Timing t = gpu.time({{"A", a}, {"B", b}}, {}, {.warmup = 2, .repeats = 7, .flush_l2 = true});
  REQUIRE(t.samples_ms.size() == 7);
  for (double ms : t.samples_ms) CHECK(ms > 0);
  std::vector<double> sorted = t.samples_ms;
  std::sort(sorted.begin(), sorted.end());
  CHECK(t.median_ms == sorted[3]);
  CHECK(t.min_ms == sorted[0]);

  const auto got = gpu.run({{"A", a}, {"B", b}});
  const auto want = reference::evaluate(g.out, {{{"A", a}, {"B", b}}, {}}, Arithmetic::exact);
  CHECK(reference::relative_l2_error(got.at(g.out.name()), want[0]) < 1e-5);
}

TEST_CASE("GPU: GpuProgram::time refuses a timing with no timed runs and names TimingOptions") {
  TWIST_REQUIRE_GPU();
  cuda::Device device;
  const Gemm g = make_gemm({.input = f16, .output = f32});
  cuda::GpuProgram gpu(lower(g.out, schedule_tensor_core(g, GemmTiling{}), Target::sm90a()), device);
  const reference::HostTensor a = reference::random_normal(f16, {128, 64}, 1);
  const reference::HostTensor b = reference::random_normal(f16, {64, 128}, 2);
  CHECK_THROWS_WITH(gpu.time({{"A", a}, {"B", b}}, {}, {.warmup = 1, .repeats = 0}),
                    doctest::Contains("TimingOptions"));
}
