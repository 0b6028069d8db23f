// A monoid that reads a run-time Param: a softmax at a temperature, whose twist rescales by
// exp((m - r) / T). The program binds T like any scalar; the oracle, the interpreted kernels and the CUDA
// text all read it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "backends/reference/evaluate_funcs.h"
#include "lang/twist.h"
#include "scheduler/lower.h"
#include "tests/scheduler/checker_programs.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using twist::testing::compile_for_both_targets;
using twist::testing::lowered_error;
using twist::testing::random_inputs;
using twist::testing::tempered_softmax_program;
using twist::testing::TemperedSoftmaxProgram;

TEST_CASE("a softmax at a Param temperature lowers, runs against the oracle and compiles for both targets") {
  const TemperedSoftmaxProgram softmax = tempered_softmax_program("pt_");
  const Func &f = softmax.f;
  for (const Schedule &s : {Schedule(), softmax.tree}) {
    const LoweredProgram program = lower(f, s, Target::sm90a());
    REQUIRE(std::any_of(program.scalars.begin(), program.scalars.end(),
                        [](const ScalarArg &a) { return a.name == "temperature" && a.type == f32; }));
    compile_for_both_targets(program);
    for (const double t : {0.5, 2.0}) {
      for (const int n : {1, 45, 300}) {
        INFO("T = ", t, ", length ", n);
        const std::map<std::string, double> scalars = {{"pt_rows", 3}, {"pt_cols", n}, {"temperature", t}};
        const twist::testing::Tensors inputs = random_inputs(f, scalars, 17 + n);
        CHECK(lowered_error(f, s, inputs, scalars) < 1e-5);
        // The oracle against the sum written out in C++.
        const auto want = reference::evaluate(f, {inputs, scalars}, Arithmetic::exact);
        const reference::HostTensor &in = inputs.at("pt_x");
        for (int64_t row = 0; row < 3; ++row) {
          double m = -INFINITY, l = 0;
          for (int64_t c = 0; c < n; ++c) m = std::max(m, in.get_linear(row * n + c));
          for (int64_t c = 0; c < n; ++c) l += std::exp((in.get_linear(row * n + c) - m) / t);
          CHECK(std::abs(want[0].get_linear(row) - l) <= 1e-9 * l);
        }
      }
    }
  }
}
