// A user's own op against the installed twist: a row-wise mean written with a monoid of the user's own,
// checked for associativity, scheduled one row per thread with the reduction split (which the checker
// must allow), lowered, run on the CPU interpreter and compared with a plain loop. Returns non-zero when
// any of that fails, since the package's test runs it.
#include <cstdio>

#include "algebra/check.h"
#include "backends/reference/host_tensor.h"
#include "backends/reference/interpreter/interpreter.h"
#include "lang/twist.h"
#include "scheduler/lower.h"

using namespace twist;

int main() {
  const Monoid mean =
      MonoidBuilder("mean")
          .state({{"n", f32}, {"sum", f32}})
          .elements({{"x", f32}})
          .identity({0.0f, 0.0f})
          .combine([](const State &a, const State &b) {
            return std::vector<Expr>{a[0] + b[0], a[1] + b[1]};
          })
          .lift([](const State &x) {
            return std::vector<Expr>{Expr(1.0f), x[0]};
          })
          .finalize({{"mean", f32}}, [](const State &s) { return std::vector<Expr>{s[1] / s[0]}; })
          .build();
  const algebra::Verdict verdict = algebra::check_associativity(mean);
  std::printf("%s\n", verdict.to_string().c_str());
  if (!verdict.accepted) return 1;

  SizeParam rows("rows"), cols("cols");
  Input x("X", f32, {rows, cols});
  Var i("i");
  RDom r({{0, cols}}, "r");
  Func row_mean("row_mean");
  row_mean(i) = reduce(mean, r, x(i, r.x));
  row_mean.set_shape({rows});
  Schedule s;
  s[row_mean]
      .split("i", "io", "it", 32)
      .bind("io", Binding::block_x)
      .bind("it", Binding::thread)
      .split("r.x", "ro", "ri", 4);
  const LoweredProgram program = lower(row_mean, s, Target::sm80());

  const reference::HostTensor input = reference::random_normal(f32, {45, 37}, 7);
  const reference::HostTensor got = reference::run_program(program, {{"X", input}}, {}).at("row_mean");
  reference::HostTensor want(f64, {45});
  for (int64_t a = 0; a < 45; ++a) {
    double total = 0;
    for (int64_t b = 0; b < 37; ++b) total += input.get({a, b});
    want.set({a}, total / 37);
  }
  const double error = reference::relative_l2_error(got, want);
  std::printf("row mean 45x37 on the interpreter vs a loop: relative L2 error %.3g\n", error);
  return error < 1e-6 ? 0 : 1;
}
