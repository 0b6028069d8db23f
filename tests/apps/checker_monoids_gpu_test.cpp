// The programs of tests/scheduler/checker_programs.h on the GPU: integer reductions by bitwise operators and
// max over elements shifted by run-time amounts (the CUDA text's shifts must follow Halide's, as the oracle
// does), exactly; and a softmax at a Param temperature, within rounding.
#include <doctest/doctest.h>

#include "backends/cuda/program/gpu_program.h"
#include "backends/reference/evaluate_funcs.h"
#include "scheduler/lower.h"
#include "tests/gpu_support.h"
#include "tests/scheduler/checker_programs.h"

using namespace twist;
using namespace twist::testing;
using reference::HostTensor;

TEST_CASE("GPU: bitwise and integer max reductions over run-time shifts match the oracle exactly") {
  TWIST_REQUIRE_GPU();
  static cuda::Device device;
  SizeParam rows("gir_rows"), cols("gir_cols");
  Input x("gir_x", i32, {rows, cols});
  Var i("i");
  RDom r({{0, cols}}, "gir_r");
  for (const auto &[monoid, op, identity] : integer_reductions()) {
    Func f("gir_f");
    f(i) = reduce(monoid, r, shifted_element(x(i, r.x)));
    f.set_shape({rows});
    for (const Schedule &schedule : integer_schedules(f, "gir_r.x")) {
      const LoweredProgram program = lower(f, schedule, Target::sm90a());
      cuda::GpuProgram gpu(program, device);
      for (const int n : {1, 45, 4000}) {
        INFO(monoid.name, " over rows of ", n);
        const std::map<std::string, double> sizes = {{"gir_rows", 37}, {"gir_cols", n}};
        const std::map<std::string, HostTensor> inputs = {{"gir_x", random_words({37, n}, 3 + n)}};
        const HostTensor got = gpu.run(inputs, sizes).at(program.outputs[0].name);
        const HostTensor want = reference::evaluate(f, {inputs, sizes}, Arithmetic::exact)[0];
        for (int64_t row = 0; row < 37; ++row) CHECK(got.get_linear(row) == want.get_linear(row));
      }
    }
  }
}

TEST_CASE("GPU: a softmax at a Param temperature matches the oracle") {
  TWIST_REQUIRE_GPU();
  static cuda::Device device;
  const TemperedSoftmaxProgram softmax = tempered_softmax_program("gpt_");
  const Func &f = softmax.f;
  for (const Schedule &schedule : {Schedule(), softmax.tree}) {
    const LoweredProgram program = lower(f, schedule, Target::sm90a());
    cuda::GpuProgram gpu(program, device);
    for (const double t : {0.25, 3.0}) {
      INFO("T = ", t);
      const std::map<std::string, double> scalars = {
          {"gpt_rows", 37}, {"gpt_cols", 1000}, {"temperature", t}};
      const std::map<std::string, HostTensor> inputs = {
          {"gpt_x", reference::random_normal(f32, {37, 1000}, 5)}};
      const HostTensor got = gpu.run(inputs, scalars).at(program.outputs[0].name);
      HostTensor wide(f64, got.shape());
      for (int64_t e = 0; e < got.size(); ++e) wide.set_linear(e, got.get_linear(e));
      CHECK(reference::relative_l2_error(
                wide, reference::evaluate(f, {inputs, scalars}, Arithmetic::exact)[0]) < 1e-5);
    }
  }
}
