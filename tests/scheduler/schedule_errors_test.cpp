// Schedules that cannot run are refused with a message that names the problem.
#include <doctest/doctest.h>

#include "algebra/builtins.h"
#include "apps/gemm/gemm.h"
#include "scheduler/lower.h"

using namespace twist;
using namespace twist::apps;

namespace {

std::string lowering_error(const Func &out, const Schedule &s) {
  try {
    lower(out, s, Target::sm90a());
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a schedule that overflows shared memory names the budget and the demand") {
  Gemm g = make_gemm();
  GemmTiling t;
  t.block_m = 256, t.block_n = 256, t.block_k = 64, t.stages = 8;
  const std::string msg = lowering_error(g.out, schedule_tensor_core(g, t));
  CHECK(msg.find("shared memory") != std::string::npos);
  CHECK(msg.find(std::to_string(227 * 1024)) != std::string::npos);
  CHECK(msg.find("524288") != std::string::npos);  // 8 stages x (256x64 + 64x256) x 2 bytes
}

TEST_CASE("a schedule that binds more than 1024 threads is refused") {
  Gemm g = make_gemm();
  const std::string msg = lowering_error(g.out, schedule_simt(g, 64, 1, 16));
  CHECK(msg.find("4096 threads") != std::string::npos);
  CHECK(msg.find("1024") != std::string::npos);
}

TEST_CASE("splitting a non-associative reduction is refused with a counterexample, unless overridden") {
  SizeParam N("ne_N");
  Input x("ne_x", f32, {N});
  Var i("i");
  RDom r({{0, N}}, "ne_r");
  const Monoid difference =
      MonoidBuilder("difference")
          .state({{"v", f32}})
          .identity({0.0f})
          .combine([](const State &a, const State &b) { return std::vector<Expr>{a[0] - b[0]}; })
          .build();
  Func f("ne_f");
  f(i) = reduce(difference, r, x(r.x + i * 0));
  f.set_shape({1});
  Schedule s;
  s[f].split("i", "io", "it", 1)
      .bind("io", Binding::block_x)
      .bind("it", Binding::thread)
      .split_reduction("ne_r.x", 4);
  const std::string msg = lowering_error(f, s);
  CHECK(msg.find("split_reduction of ne_f") != std::string::npos);
  CHECK(msg.find("difference") != std::string::npos);
  CHECK(msg.find("counterexample") != std::string::npos);

  s[f].assume_associative("testing the override");
  const LoweredProgram p = lower(f, s, Target::sm90a());
  CHECK(p.kernels[0].schedule_summary.find("testing the override") != std::string::npos);
}

TEST_CASE(
    "a matrix atom over loops of the wrong size, or over a reduction that is not a contraction, is refused") {
  Gemm g = make_gemm();
  Schedule s = schedule_tensor_core(g, GemmTiling{});
  Func relu("relu_C");
  Var i("i"), j("j");
  relu(i, j) = max(g.C(i, j), 0.0f);
  relu.set_shape({g.M, g.N});
  // Fine: a pure consumer is a fused epilogue.
  CHECK(lowering_error(relu, s).empty());
  s[g.C].matrix_atom(MatrixAtom::mma_m16n8k16, "ia", "ja", "kt");
  CHECK(lowering_error(relu, s).find("16 x 8 x 16") != std::string::npos);

  // The GEMM's schedule on a (max, +) product of the same inputs: same loops, but no contraction.
  Func C("max_plus");
  C(i, j) = reduce(algebra::max(f32), g.k, cast(f32, g.A(i, g.k.x)) + cast(f32, g.B(g.k.x, j)));
  C.set_shape({g.M, g.N});
  Schedule renamed;
  renamed.set_like(C, *schedule_tensor_core(g, GemmTiling{}).find(g.C.name()));
  const std::string msg = lowering_error(C, renamed);
  CHECK(msg.find("sum of products") != std::string::npos);
}

TEST_CASE("hybrid accumulation whose promotion count fits no k-step loop is refused") {
  Gemm g = make_gemm();
  GemmTiling t;
  t.accumulation =
      Accumulation::hybrid(3);  // 2 k-steps per 32-deep tile: neither divides nor is divided by 3
  const std::string msg = lowering_error(g.out, schedule_tensor_core(g, t));
  CHECK(msg.find("promotes every 3 k-steps") != std::string::npos);
  t.accumulation = Accumulation::hybrid(4);  // every second tile: fine
  CHECK(lowering_error(g.out, schedule_tensor_core(g, t)).empty());
}
