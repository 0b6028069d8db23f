// The Hopper intrinsics on the hardware: the hand-written TMA + mbarrier + wgmma products of the
// interpreter's tests (tests/reference/interpreter/hopper_kernels.h) run on the GPU, with their tensor maps
// encoded by the runtime, and must give the product the interpreter's layouts promise: the swizzle the TMA
// writes, the descriptors wgmma reads through, the accumulator and register-A fragments. Skipped without an
// sm_90 GPU.
#include <doctest/doctest.h>

#include <cmath>

#include "backends/cuda/program/gpu_program.h"
#include "backends/reference/interpreter/interpreter.h"
#include "lang/float_formats.h"
#include "tests/gpu_support.h"
#include "tests/reference/interpreter/hopper_kernels.h"

using namespace twist::reference;
using namespace twist::reference::testing;

namespace {

HostTensor dyadic(const twist::Type &type, std::vector<int64_t> shape, uint64_t seed) {
  HostTensor t = random_uniform(twist::i32, shape, seed, -32, 32);
  HostTensor out(type, shape);
  for (int64_t i = 0; i < t.size(); ++i) out.set_linear(i, t.get_linear(i) / 8.0);
  return out;
}

// Exact for f32 accumulators (the values' products and sums are exact); f16 accumulators round inside each
// k-step in an order the hardware does not specify, so they are compared to a relative 2^-9.
void check_on_gpu(const HopperProduct &p) {
  LoweredProgram program;
  program.name = "hopper_product";
  program.kernels = {hopper_product_kernel(p)};
  program.inputs = {program.kernels[0].buffers[0], program.kernels[0].buffers[1]};
  program.outputs = {program.kernels[0].buffers[2]};
  const HostTensor A = dyadic(p.input, {p.m, p.k}, 1);
  const HostTensor B =
      dyadic(p.input, p.b_k_major ? std::vector<int64_t>{p.n, p.k} : std::vector<int64_t>{p.k, p.n}, 2);
  static twist::cuda::Device device;
  twist::cuda::GpuProgram gpu(program, device);
  const HostTensor D = gpu.run({{"A", A}, {"B", B}}).at("D");
  const HostTensor want = run_program(program, {{"A", A}, {"B", B}}, {}).at("D");
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t c = 0; c < p.n; ++c) {
      INFO("D[" << r << ", " << c << "]");
      if (p.accumulator == twist::f32)
        REQUIRE(D.get({r, c}) == want.get({r, c}));
      else
        REQUIRE(std::abs(D.get({r, c}) - want.get({r, c})) <= std::ldexp(std::abs(want.get({r, c})) + 1, -9));
    }
  }
}

}  // namespace

TEST_CASE("GPU: TMA + mbarrier + wgmma products match the interpreter's layouts") {
  TWIST_REQUIRE_COMPUTE_CAPABILITY(9, "TMA and wgmma");
  for (const int n : {64, 72, 256}) {
    INFO("MN-major B, N = " << n);
    check_on_gpu({.m = 64, .n = n});
  }
  for (const int n : {8, 56, 256}) {
    INFO("K-major B, N = " << n);
    check_on_gpu({.m = 64, .n = n, .b_k_major = true});
  }
  check_on_gpu({.m = 37, .n = 72});
  check_on_gpu({.m = 50, .n = 64, .input = twist::bf16});
  check_on_gpu({.m = 64, .n = 64, .a_in_registers = true});
  check_on_gpu({.m = 45, .n = 136, .a_in_registers = true, .input = twist::bf16});
  check_on_gpu({.m = 64, .n = 128, .accumulator = twist::f16});
}
