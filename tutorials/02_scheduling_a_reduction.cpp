// Tutorial 2: scheduling a reduction, in C++.
//
// One algorithm, the log-sum-exp of each row of X (a twisted monoid, lesson 1), and four schedules of it: one
// thread per row, tiles of the reduction, a cooperative tree across the threads of a block, and that tree
// with the reduction split across blocks (split-K). Each is lowered to the loop-nest IR and run on the CPU
// interpreter (thread by thread, every value rounded to its type) against the algorithm oracle. The notebook
// tutorials/03_scheduling_a_reduction.ipynb prints the CUDA of every step; `twist demo --dump=...` prints the
// stages of the library's programs.
//
// The program checks what it shows and returns non-zero when a schedule's result or shape is not the expected
// one.
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "algebra/online.h"
#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/reference/evaluate_funcs.h"
#include "backends/reference/interpreter/interpreter.h"
#include "lang/twist.h"
#include "scheduler/lower.h"

using namespace twist;

int main() {
  SizeParam rows("rows"), cols("cols");
  Input x("X", f32, {rows, cols});
  Var i("i");
  RDom r({{0, cols}}, "r");
  Func lse("lse");
  lse(i) = reduce(algebra::log_sum_exp(f32), r, x(i, r.x));
  lse.set_shape({rows});

  const reference::HostTensor data = reference::random_normal(f32, {37, 301}, 7, 0.0, 20.0);
  const std::vector<reference::HostTensor> oracle =
      reference::evaluate(lse, {{{"X", data}}, {}}, Arithmetic::exact);

  struct Step {
    const char *what;
    std::function<void(FuncSchedule &)> schedule;
    size_t kernels;
  };
  const Step steps[] = {
      {"one thread per row: each thread folds its row in order",
       [](FuncSchedule &s) {
         s.split("i", "io", "it", 32).bind("io", Binding::block_x).bind("it", Binding::thread);
       },
       1},
      {"tiles of 8 elements, folded from the identity, then the tiles in order (unrolled)",
       [](FuncSchedule &s) {
         s.split("i", "io", "it", 32).bind("io", Binding::block_x).bind("it", Binding::thread);
         s.split("r.x", "ro", "ri", 8).unroll("ri");
       },
       1},
      {"a block per row: 64 threads fold strided slices, then combine as a tree (shuffles, shared memory)",
       [](FuncSchedule &s) {
         s.bind("i", Binding::block_x).split("r.x", "ro", "rt", 64).bind("rt", Binding::thread);
       },
       1},
      {"the tree, with the outer reduction loop split across 4 blocks and a kernel combining the parts",
       [](FuncSchedule &s) {
         s.bind("i", Binding::block_x)
             .split("r.x", "ro", "rt", 64)
             .bind("rt", Binding::thread)
             .split_reduction("ro", 4);
       },
       2},
  };

  int failures = 0;
  for (const Step &step : steps) {
    Schedule s;
    step.schedule(s[lse]);
    const LoweredProgram p = lower(lse, s, Target::sm90a());
    const reference::HostTensor got = reference::run_program(p, {{"X", data}}, {}).at("lse");
    double worst = 0;
    for (int64_t e = 0; e < got.size(); ++e)
      worst = std::max(worst, std::fabs(got.get_linear(e) - oracle[0].get_linear(e)));
    std::printf("== %s\n%s-- %zu kernel(s); interpreter against the oracle: max abs error %.2e\n\n",
                step.what, to_string(p).c_str(), p.kernels.size(), worst);
    if (worst > 1e-4 || p.kernels.size() != step.kernels) {
      std::printf("FAILED: expected %zu kernel(s) and an error below 1e-4\n", step.kernels);
      ++failures;
    }
    if (p.kernels.size() == 2)
      std::printf("-- the CUDA of the combine kernel:\n%s\n", cuda::cuda_source(p.kernels[1]).c_str());
  }
  return failures == 0 ? 0 : 1;
}
