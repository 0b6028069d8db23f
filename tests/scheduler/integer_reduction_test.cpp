// Reductions by integer monoids written with the bitwise operators and integer max, over elements shifted
// by run-time amounts: lowered, run on the interpreter and compared exactly with the oracle and with the same
// fold in C++ (integers leave no room for rounding), and their kernels compiled with NVRTC for sm_80 and
// sm_90a.
#include <doctest/doctest.h>

#include "backends/reference/evaluate_funcs.h"
#include "backends/reference/interpreter/interpreter.h"
#include "scheduler/arguments.h"
#include "scheduler/lower.h"
#include "tests/scheduler/checker_programs.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using namespace twist::testing;

TEST_CASE(
    "bitwise or, and, xor and integer max reductions match the oracle exactly and compile for both targets") {
  SizeParam rows("ir_rows"), cols("ir_cols");
  Input x("ir_x", i32, {rows, cols});
  Var i("i");
  RDom r({{0, cols}}, "ir_r");
  for (const auto &[monoid, op, identity] : integer_reductions()) {
    Func f("ir_f");
    f(i) = reduce(monoid, r, shifted_element(x(i, r.x)));
    f.set_shape({rows});
    for (const Schedule &schedule : integer_schedules(f, "ir_r.x")) {
      const LoweredProgram program = lower(f, schedule, Target::sm90a());
      compile_for_both_targets(program);
      for (const int n : {1, 45, 333}) {
        INFO(monoid.name, " over rows of ", n);
        const std::map<std::string, double> sizes = {{"ir_rows", 3}, {"ir_cols", n}};
        const Tensors inputs = {{"ir_x", random_words({3, n}, 7 + n)}};
        const auto got =
            reference::run_program(program, inputs, bind_arguments(program, {{"ir_x", {3, n}}}, sizes));
        const auto want = reference::evaluate(f, {inputs, sizes}, Arithmetic::exact);
        const reference::HostTensor &g = got.at(program.outputs[0].name);
        const reference::HostTensor &in = inputs.at("ir_x");
        for (int64_t row = 0; row < 3; ++row) {
          int32_t folded = identity;
          for (int64_t c = 0; c < n; ++c)
            folded = op(folded, shifted_element(static_cast<int32_t>(in.get_linear(row * n + c))));
          CHECK(want[0].get_linear(row) == folded);
          CHECK(g.get_linear(row) == folded);
        }
      }
    }
  }
}
