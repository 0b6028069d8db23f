// Pipelines through the whole lowering: funcs inlined, computed at a row of their consumer, or computed as
// stages of their own; cooperative trees for every built-in monoid, the twisted ones and a user's; programs
// with no schedule. Each runs on the interpreter against the oracle.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "algebra/builtins.h"
#include "algebra/online.h"
#include "apps/norms/norms.h"
#include "backends/reference/evaluate_funcs.h"
#include "backends/reference/interpreter/interpreter.h"
#include "lang/twist.h"
#include "scheduler/arguments.h"
#include "scheduler/lower.h"
#include "tests/error_capture.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using twist::testing::compile_for_both_targets;
using twist::testing::contains;
using twist::testing::error_of;
using twist::testing::lowered_error;
using twist::testing::random_inputs;
using twist::testing::Tensors;

namespace {

// The loads and copies of global buffer `name` in a kernel body: how often the kernel reads it.
int global_reads(const Kernel &k, const std::string &name) {
  struct Reads : Halide::Internal::IRVisitor {
    const std::string &name;
    int count = 0;
    explicit Reads(const std::string &n) : name(n) {}
    using IRVisitor::visit;
    void visit(const Halide::Internal::Load *l) override {
      count += l->name == name;
      IRVisitor::visit(l);
    }
    void visit(const Halide::Internal::StringImm *s) override { count += s->value == name; }
  } reads(name);
  k.body.accept(&reads);
  return reads.count;
}

// Every output element of the interpreted program against the exact oracle: equal where the oracle is not
// finite (a row of -inf gives -inf or the monoid's empty value), within `tolerance` relative to the row's
// scale elsewhere.
void check_elementwise(const Func &out, const Schedule &s, const Tensors &inputs,
                       const std::map<std::string, double> &scalars, double tolerance) {
  const LoweredProgram program = lower(out, s, Target::sm90a());
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto &[name, t] : inputs) shapes[name] = t.shape();
  const auto got = reference::run_program(program, inputs, bind_arguments(program, shapes, scalars));
  const auto want = reference::evaluate(out, {inputs, scalars}, Arithmetic::exact);
  REQUIRE(got.size() == want.size());
  for (size_t o = 0; o < want.size(); ++o) {
    const reference::HostTensor &g = got.at(program.outputs[o].name);
    for (int64_t e = 0; e < want[o].size(); ++e) {
      const double w = want[o].get_linear(e), v = g.get_linear(e);
      INFO(program.outputs[o].name, " element ", e, ": got ", v, ", want ", w);
      if (!std::isfinite(w)) {
        CHECK((std::isnan(w) ? std::isnan(v) : v == w));
      } else {
        CHECK(std::abs(v - w) <= tolerance * (1 + std::abs(w)));
      }
    }
  }
}

struct Rms {
  SizeParam rows{"rms_rows"};
  Input x, w;
  Var i{"i"}, j{"j"};
  RDom r;
  Func ss{"rms_ss"}, y{"rms_y"};
  Rms(int cols, const Type &t)
      : x("rms_x", t, {rows, Expr(cols)}), w("rms_w", t, {Expr(cols)}), r({{0, Expr(cols)}}, "rms_r") {
    // The RMSNorm, written the natural way.
    ss(i) = reduce(algebra::sum(f32), r, cast(f32, x(i, r.x)) * cast(f32, x(i, r.x)));
    y(i, j) = cast(t, cast(f32, x(i, j)) * rsqrt(ss(i) / cast(f32, cols) + 1e-6f) * cast(f32, w(j)));
    y.set_shape({rows, Expr(cols)});
  }
};

}  // namespace

TEST_CASE("a pure func alone lowers to one elementwise kernel and matches the oracle") {
  SizeParam n("pw_n"), m("pw_m");
  Input a("pw_a", f32, {n, m}), b("pw_b", f32, {n, m});
  Var i("i"), j("j");
  Func t("pw_t"), out("pw_out");
  t(i, j) = a(i, j) * 2.0f + b(i, j);
  out(i, j) = max(t(i, j), 0.0f) - b(i, j);
  out.set_shape({n, m});
  const LoweredProgram p = lower(out, Schedule(), Target::sm90a());
  CHECK(p.kernels.size() == 1);
  const std::map<std::string, double> sizes = {{"pw_n", 5}, {"pw_m", 37}};
  CHECK(lowered_error(out, Schedule(), random_inputs(out, sizes, 3), sizes) < 1e-6);
}

TEST_CASE("RMSNorm written with ss(i) lowers to one kernel that reads x once and matches the oracle") {
  for (const int cols : {77, 64, 200}) {
    for (const bool scheduled : {false, true}) {
      Rms n(cols, f16);
      Schedule s;
      if (scheduled) s[n.ss].compute_at(n.y, n.i);
      const LoweredProgram p = lower(n.y, s, Target::sm90a());
      INFO("cols ", cols, scheduled ? " compute_at(y, i)" : " no schedule");
      REQUIRE(p.kernels.size() == 1);
      CHECK(global_reads(p.kernels[0], "rms_x") == 1);
      CHECK(global_reads(p.kernels[0], "rms_w") == 1);
      const std::map<std::string, double> sizes = {{"rms_rows", 3}};
      CHECK(lowered_error(n.y, s, random_inputs(n.y, sizes, 11), sizes) < 2e-3);
    }
  }
}

TEST_CASE("a reduction read by a consumer of higher rank is computed at its row") {
  SizeParam rows("hr_rows"), cols("hr_cols");
  Input x("hr_x", f32, {rows, cols});
  Var i("i"), j("j");
  RDom r({{0, cols}}, "hr_r");
  Func total("hr_total"), y("hr_y");
  total(i) = reduce(algebra::sum(f32), r, x(i, r.x));
  y(i, j) = x(i, j) - total(i) / cast(f32, cols);
  y.set_shape({rows, cols});
  const LoweredProgram p = lower(y, Schedule(), Target::sm90a());
  CHECK(p.kernels.size() == 1);
  CHECK(contains(p.kernels[0].schedule_summary,
                 "not a constant"));  // x is read twice: its row length is symbolic
  for (const int c : {1, 33, 300}) {
    const std::map<std::string, double> sizes = {{"hr_rows", 4}, {"hr_cols", c}};
    CHECK(lowered_error(y, Schedule(), random_inputs(y, sizes, 5), sizes) < 1e-6);
  }
}

TEST_CASE("two reductions in sequence, a mean and then the variance around it, in one row kernel") {
  const int cols = 96;
  SizeParam rows("ln_rows");
  Input x("ln_x", f32, {rows, Expr(cols)});
  Var i("i"), j("j");
  RDom r({{0, cols}}, "ln_r"), q({{0, cols}}, "ln_q");
  Func total("ln_total"), mean("ln_mean"), var("ln_var"), y("ln_y");
  total(i) = reduce(algebra::sum(f32), r, x(i, r.x));
  mean(i) = total(i) / float(cols);
  var(i) = reduce(algebra::sum(f32), q, (x(i, q.x) - mean(i)) * (x(i, q.x) - mean(i)));
  y(i, j) = (x(i, j) - mean(i)) * rsqrt(var(i) / float(cols) + 1e-5f);
  y.set_shape({rows, Expr(cols)});
  const LoweredProgram p = lower(y, Schedule(), Target::sm90a());
  REQUIRE(p.kernels.size() == 1);
  CHECK(global_reads(p.kernels[0], "ln_x") == 1);
  const std::map<std::string, double> sizes = {{"ln_rows", 3}};
  CHECK(lowered_error(y, Schedule(), random_inputs(y, sizes, 9), sizes) < 1e-5);
}

TEST_CASE("a compute_root stage feeds a GEMM through a workspace") {
  SizeParam M("cr_M"), N("cr_N"), K("cr_K");
  Input a("cr_a", f32, {M, K}), b("cr_b", f32, {K, N});
  Var i("i"), j("j");
  RDom k({{0, K}}, "cr_k");
  Func act("cr_act"), c("cr_c");
  act(i, j) = max(a(i, j), 0.0f);
  c(i, j) = reduce(algebra::sum(f32), k, act(i, k.x) * b(k.x, j));
  c.set_shape({M, N});
  Schedule s;
  s[act].compute_root();
  s[c].split(i, "io", "ii", 1)
      .split(j, "jo", "ji", 32)
      .bind("io", Binding::block_y)
      .bind("jo", Binding::block_x)
      .bind("ji", Binding::thread);
  const LoweredProgram p = lower(c, s, Target::sm90a());
  REQUIRE(p.kernels.size() == 2);
  REQUIRE(p.workspaces.size() == 1);
  CHECK(p.workspaces[0].name == "cr_act");
  CHECK(global_reads(p.kernels[1], "cr_a") == 0);
  CHECK(global_reads(p.kernels[1], "cr_act") > 0);
  const std::map<std::string, double> sizes = {{"cr_M", 5}, {"cr_N", 40}, {"cr_K", 19}};
  CHECK(lowered_error(c, s, random_inputs(c, sizes, 4), sizes) < 1e-6);
}

TEST_CASE("a func of two outputs: fused residual add and RMSNorm") {
  const int cols = 120;
  SizeParam rows("res_rows");
  Input x("res_x", f16, {rows, Expr(cols)}), res("res_res", f16, {rows, Expr(cols)}),
      w("res_w", f16, {Expr(cols)});
  Var i("i"), j("j");
  RDom r({{0, cols}}, "res_r");
  Func h("res_h"), ss("res_ss"), out("res_out");
  h(i, j) = cast(f32, x(i, j)) + cast(f32, res(i, j));
  ss(i) = reduce(algebra::sum(f32), r, h(i, r.x) * h(i, r.x));
  out(i, j) = {cast(f16, h(i, j)), cast(f16, h(i, j) * rsqrt(ss(i) / float(cols) + 1e-6f) * cast(f32, w(j)))};
  out.set_shape({rows, Expr(cols)});
  Schedule s;
  s[ss].compute_at(out, i);
  const LoweredProgram p = lower(out, s, Target::sm90a());
  REQUIRE(p.kernels.size() == 1);
  CHECK(p.outputs.size() == 2);
  CHECK(global_reads(p.kernels[0], "res_x") == 1);
  CHECK(global_reads(p.kernels[0], "res_res") == 1);
  const std::map<std::string, double> sizes = {{"res_rows", 3}};
  CHECK(lowered_error(out, s, random_inputs(out, sizes, 2), sizes) < 2e-3);
}

TEST_CASE(
    "cooperative trees: every built-in monoid, softmax, Welford and a user monoid, odd lengths, 0, 1, -inf") {
  const Monoid mean =
      MonoidBuilder("tree_mean")
          .state({{"n", f32}, {"sum", f32}})
          .elements({{"x", f32}})
          .identity({0.0f, 0.0f})
          .combine([](const State &a, const State &b) {
            return std::vector<Expr>{a[0] + b[0], a[1] + b[1]};
          })
          .lift([](const State &x) {
            return std::vector<Expr>{Expr(1.0f), x[0]};
          })
          .finalize({{"mean", f32}},
                    [](const State &s) { return std::vector<Expr>{select(s[0] > 0.0f, s[1] / s[0], 0.0f)}; })
          .commutative()  // so that its tree may deal the points to threads in turn
          .build();
  struct Case {
    Monoid monoid;
    bool indexed;       // elements (value, index)
    bool infinite_row;  // a row of -inf is meaningful for it
    std::vector<int> lengths;
  };
  const std::vector<int> lengths = {0, 1, 31, 33, 100, 257};
  const std::vector<Case> cases = {
      {algebra::sum(f32), false, false, lengths},
      {algebra::product(f32), false, false, {0, 1, 31, 33}},
      {algebra::max(f32), false, true, lengths},
      {algebra::min(f32), false, false, lengths},
      {algebra::argmax(f32), true, true, lengths},
      {algebra::argmin(f32), true, false, lengths},
      {algebra::softmax(f32), false, true, lengths},
      {algebra::log_sum_exp(f32), false, true, lengths},
      {algebra::welford(f32), false, false, lengths},
      {algebra::sum(i32), false, false, lengths},
      {mean, false, false, lengths},
  };
  for (const Case &c : cases) {
    for (const int variant : {0, 1, 2}) {  // the default tree, 64 threads, 2 warps of 32 lanes
      SizeParam rows("tr_rows"), len("tr_len");
      const Type t = c.monoid.elements[0].type;
      Input x("tr_x", t, {rows, Expr(300)});
      Var i("i");
      RDom r({{0, len}}, "tr_r");
      Func f("tr_f");
      if (c.indexed)
        f(i) = reduce(c.monoid, r, {x(i, r.x), r.x});
      else
        f(i) = reduce(c.monoid, r, x(i, r.x));
      f.set_shape({rows});
      Schedule s;
      if (variant == 1) s[f].split("tr_r.x", "ro", "rt", 64).bind("rt", Binding::thread);
      if (variant == 2)
        s[f].split("tr_r.x", "ro", "rl", 32)
            .split("ro", "rs", "rw", 2)
            .bind("rl", Binding::thread)
            .bind("rw", Binding::warp);
      const LoweredProgram p = lower(f, s, Target::sm90a());
      CHECK(contains(p.kernels[0].schedule_summary, "cooperative tree"));
      for (const int n : c.lengths) {
        INFO(c.monoid.name, " variant ", variant, " length ", n);
        const std::map<std::string, double> sizes = {{"tr_rows", 3}, {"tr_len", n}};
        Tensors in = random_inputs(f, sizes, 17);
        if (c.infinite_row)
          for (int e = 300; e < 600; ++e)
            in.at("tr_x").set_linear(e, -std::numeric_limits<double>::infinity());
        check_elementwise(f, s, in, sizes, t == i32 ? 0 : 1e-5);
      }
    }
  }
}

TEST_CASE("trees over several RVars, by default and bound to threads") {
  SizeParam rows("mr_rows");
  Input x("mr_x", f32, {rows, Expr(7), Expr(13)});
  Var i("i");
  RDom r({{0, 13}, {0, 7}}, "mr_r");
  Func f("mr_f");
  f(i) = reduce(algebra::welford(f32), r, x(i, r.y, r.x));
  f.set_shape({rows});
  Schedule bound;
  bound[f].fuse("mr_r.x", "mr_r.y", "rf").split("rf", "ro", "rt", 32).bind("rt", Binding::thread);
  const std::map<std::string, double> sizes = {{"mr_rows", 3}};
  for (const Schedule &s : {Schedule(), bound})
    CHECK(lowered_error(f, s, random_inputs(f, sizes, 8), sizes) < 1e-5);
}

TEST_CASE("a tree composed with split_reduction combines its parts in a second kernel") {
  SizeParam rows("sp_rows"), cols("sp_cols");
  Input x("sp_x", f32, {rows, cols});
  Var i("i");
  RDom r({{0, cols}}, "sp_r");
  for (const Monoid &m : {algebra::sum(f32), algebra::softmax(f32), algebra::welford(f32)}) {
    Func f("sp_f");
    f(i) = reduce(m, r, x(i, r.x));
    f.set_shape({rows});
    Schedule s;
    s[f].split("sp_r.x", "ro", "rt", 32).bind("rt", Binding::thread).split_reduction("ro", 4);
    const LoweredProgram p = lower(f, s, Target::sm90a());
    CHECK(p.kernels.size() == 2);
    for (const int n : {1, 100, 333}) {
      INFO(m.name, " length ", n);
      const std::map<std::string, double> sizes = {{"sp_rows", 2}, {"sp_cols", n}};
      CHECK(lowered_error(f, s, random_inputs(f, sizes, 6), sizes) < 1e-5);
    }
  }
}

TEST_CASE("programs with no schedule lower and run: softmax in three funcs, a contraction") {
  SizeParam rows("ns_rows"), cols("ns_cols");
  Input x("ns_x", f32, {rows, cols});
  Var i("i"), j("j");
  RDom r({{0, cols}}, "ns_r"), q({{0, cols}}, "ns_q");
  Func m("ns_m"), e("ns_e"), z("ns_z"), y("ns_y");
  m(i) = reduce(algebra::max(f32), r, x(i, r.x));
  e(i, j) = exp(x(i, j) - m(i));
  z(i) = reduce(algebra::sum(f32), q, e(i, q.x));
  y(i, j) = e(i, j) / z(i);
  y.set_shape({rows, cols});
  const std::map<std::string, double> sizes = {{"ns_rows", 3}, {"ns_cols", 45}};
  CHECK(lowered_error(y, Schedule(), random_inputs(y, sizes, 1), sizes) < 1e-6);
  CHECK(lower(y, Schedule(), Target::sm90a()).kernels.size() == 1);

  SizeParam M("nc_M"), N("nc_N"), K("nc_K");
  Input a("nc_a", f32, {M, K}), b("nc_b", f32, {K, N});
  RDom k({{0, K}}, "nc_k");
  Func c("nc_c");
  c(i, j) = reduce(algebra::sum(f32), k, a(i, k.x) * b(k.x, j));
  c.set_shape({M, N});
  const std::map<std::string, double> gemm = {{"nc_M", 3}, {"nc_N", 5}, {"nc_K", 70}};
  CHECK(lowered_error(c, Schedule(), random_inputs(c, gemm, 2), gemm) < 1e-6);

  // In f16, the same contraction gets the tensor-core schedule.
  Input ah("nh_a", f16, {M, K}), bh("nh_b", f16, {K, N});
  Func ch("nh_c");
  ch(i, j) = reduce(algebra::sum(f32), k, cast(f32, ah(i, k.x)) * cast(f32, bh(k.x, j)));
  ch.set_shape({M, N});
  const LoweredProgram p = lower(ch, Schedule(), Target::sm90a());
  REQUIRE(p.kernels.size() == 1);
  CHECK(contains(to_string(p), "mma.m16n8k16"));
  for (const auto &shape : {std::map<std::string, double>{{"nc_M", 130}, {"nc_N", 72}, {"nc_K", 96}},
                            std::map<std::string, double>{{"nc_M", 3}, {"nc_N", 5}, {"nc_K", 70}}})
    CHECK(lowered_error(ch, Schedule(), random_inputs(ch, shape, 3), shape) < 1e-5);
}

TEST_CASE("the kernels of pipelines compile for sm_80 and sm_90a") {
  Rms n(200, bf16);
  compile_for_both_targets(lower(n.y, Schedule(), Target::sm90a()));
  SizeParam rows("cc_rows");
  Input x("cc_x", f16, {rows, Expr(64)});
  Var i("i");
  RDom r({{0, 64}}, "cc_r");
  Func f("cc_f");
  f(i) = reduce(algebra::welford(f32), r, cast(f32, x(i, r.x)));
  f.set_shape({rows});
  Schedule s;
  s[f].split("cc_r.x", "ro", "rl", 32)
      .split("ro", "rs", "rw", 2)
      .bind("rl", Binding::thread)
      .bind("rw", Binding::warp);
  compile_for_both_targets(lower(f, s, Target::sm90a()));
}

TEST_CASE("row kernels keep the row in registers and move it with 16-byte loads and stores") {
  // 264 columns of f16: 32 threads with 2 runs of 8 columns each, the second run of all but one thread empty.
  for (const int cols : {256, 264, 4096}) {
    Rms n(cols, f16);
    const LoweredProgram p = lower(n.y, Schedule(), Target::sm90a());
    INFO("cols ", cols);
    REQUIRE(p.kernels.size() == 1);
    const Kernel &k = p.kernels[0];
    CHECK(contains(k.schedule_summary, "input 'rms_x': its row of " + std::to_string(cols) +
                                           " elements read once into registers"));
    CHECK(contains(k.schedule_summary, "in runs of 8 consecutive points"));
    CHECK(k.shared_bytes < 1024);  // only the trees' arrays: no row in shared memory
    const std::string source = compile_for_both_targets(p).front();
    CHECK(contains(source, "twist_copy_sync<16>(&rms_x_regs["));
    CHECK(contains(source, "twist_copy_sync<16>(&rms_w_v0[0], &rms_w["));
    CHECK(contains(source, "twist_copy_sync<16>(&rms_y["));
    CHECK(!contains(source, "twist_copy_async<"));
    if (cols != 4096) {
      const std::map<std::string, double> sizes = {{"rms_rows", 3}};
      CHECK(lowered_error(n.y, Schedule(), random_inputs(n.y, sizes, 13), sizes) < 2e-3);
    }
  }
  // LayerNorm by Welford's monoid (commutative) takes the same layout: its one tree reads the registers.
  const apps::Norm welford = apps::make_norm(
      apps::NormKind::layernorm,
      {.dtype = bf16, .hidden = 264, .prefix = "wf_", .layernorm = apps::LayerNormStatistics::welford});
  const Schedule ws = apps::schedule_norm(welford);
  CHECK(contains(lower(welford.out, ws, Target::sm90a()).kernels[0].schedule_summary,
                 "input 'wf_x': its row of 264 elements read once into registers"));
  const std::map<std::string, double> rows = {{"wf_rows", 3}};
  CHECK(lowered_error(welford.out, ws, random_inputs(welford.out, rows, 19), rows) < 1.6e-2);
  // A row that is not a whole number of 16-byte runs is kept in shared memory and stored point by point.
  Rms odd(77, f16);
  const Kernel k = lower(odd.y, Schedule(), Target::sm90a()).kernels[0];
  CHECK(contains(k.schedule_summary, "read once into shared memory"));
  CHECK(!contains(k.schedule_summary, "16-byte stores"));
}

TEST_CASE("row kernels test a run's place in the row only where the threads' runs do not tile it") {
  // 4096 columns of f16: 128 threads with 4 runs of 8 each tile the row, so neither the loads, the fold nor
  // the stores test their run (a branch around each run would keep the weights' loads of one run from being
  // issued before the run before it was stored). 264 columns: 32 threads with 2 runs, the runs past the
  // row's 33 skipped, and the fold's points past 264.
  struct Case {
    int cols;
    bool tested;
  };
  for (const Case c : {Case{4096, false}, Case{264, true}, Case{256, false}}) {
    Rms n(c.cols, f16);
    const LoweredProgram p = lower(n.y, Schedule(), Target::sm90a());
    const std::string source = compile_for_both_targets(p).front();
    INFO("cols ", c.cols, "\n", source);
    const int runs = c.cols / 8;
    CHECK(contains(source, fmt::format("< {}))", runs)) == c.tested);
    CHECK(contains(source, fmt::format("< {}))", c.cols)) == c.tested);
    if (c.cols != 4096) {
      const std::map<std::string, double> sizes = {{"rms_rows", 3}};
      CHECK(lowered_error(n.y, Schedule(), random_inputs(n.y, sizes, 17), sizes) < 2e-3);
    }
  }
  // A tree kernel whose threads tile its points exactly folds without tests too, and one whose threads do not
  // keeps them; both match the oracle.
  for (const int cols : {512, 500}) {
    // The default tree: 32 threads, each folding 16 points dealt in turn.
    SizeParam rows("tt_rows");
    Input x("tt_x", f32, {rows, Expr(cols)});
    Var i("i");
    RDom r({{0, Expr(cols)}}, "tt_r");
    Func total("tt_total");
    total(i) = reduce(algebra::sum(f32), r, x(i, r.x));
    total.set_shape({rows});
    const Schedule s;
    const LoweredProgram p = lower(total, s, Target::sm90a());
    REQUIRE(p.kernels.size() == 1);
    CHECK(p.kernels[0].threads == 32);
    INFO("cols ", cols);
    CHECK(contains(compile_for_both_targets(p).front(), fmt::format("< {}))", cols)) == (cols == 500));
    const std::map<std::string, double> sizes = {{"tt_rows", 3}};
    CHECK(lowered_error(total, s, random_inputs(total, sizes, 23), sizes) < 1e-5);
  }
}

TEST_CASE("LayerNorm by shifted sums: one tree, accurate for rows far from zero") {
  for (const Type &t : {f16, bf16})
    for (const int hidden : {77, 256, 264}) {
      const apps::Norm n =
          apps::make_norm(apps::NormKind::layernorm, {.dtype = t,
                                                      .hidden = hidden,
                                                      .prefix = "sh_",
                                                      .layernorm = apps::LayerNormStatistics::shifted_sums});
      const Schedule s = apps::schedule_norm(n);
      const LoweredProgram p = lower(n.out, s, Target::sm90a());
      INFO(type_name(t), " hidden ", hidden);
      REQUIRE(p.kernels.size() == 1);
      CHECK(contains(p.kernels[0].schedule_summary, "cooperative tree of sh_layernorm_sums"));
      CHECK(!contains(p.kernels[0].schedule_summary, "layernorm_m2"));
      const std::map<std::string, double> sizes = {{"sh_rows", 3}};
      Tensors inputs = random_inputs(n.out, sizes, 29);
      CHECK(lowered_error(n.out, s, inputs, sizes) < (t == f16 ? 2e-3 : 1.6e-2));
      // Rows around 64 with a spread of about 1 (the plain sum of squares would cancel: 64^2 against 1),
      // one of them starting at an outlier 30 above the rest.
      reference::HostTensor &x = inputs.at("sh_x");
      for (int64_t e = 0; e < x.size(); ++e) x.set_linear(e, 64 + x.get_linear(e));
      x.set_linear(0, 94);
      CHECK(lowered_error(n.out, s, inputs, sizes) < (t == f16 ? 2e-3 : 1.6e-2));
    }
}

TEST_CASE("LayerNorm's statistics on rows far from zero: mean 1e3, spread 1") {
  // Every statistic against the exact oracle, on rows whose plain sum of squares would cancel (1e6 against
  // 1), and the same rows with their first element (shifted sums' K) an outlier 30 above the rest.
  for (const Type &t : {f16, bf16})
    for (const auto statistics : {apps::LayerNormStatistics::two_pass, apps::LayerNormStatistics::welford,
                                  apps::LayerNormStatistics::shifted_sums})
      for (const bool outlier : {false, true}) {
        const apps::Norm n =
            apps::make_norm(apps::NormKind::layernorm,
                            {.dtype = t, .hidden = 2048, .prefix = "lm_", .layernorm = statistics});
        const Schedule s = apps::schedule_norm(n);
        const std::map<std::string, double> sizes = {{"lm_rows", 3}};
        Tensors inputs = random_inputs(n.out, sizes, 31);
        reference::HostTensor &x = inputs.at("lm_x");
        for (int64_t e = 0; e < x.size(); ++e) x.set_linear(e, 1000 + x.get_linear(e));
        if (outlier)
          for (int64_t row = 0; row < 3; ++row) x.set_linear(row * 2048, 1030);
        const double error = lowered_error(n.out, s, inputs, sizes);
        const std::string what =
            fmt::format("{} {}{}: relative L2 error {:.3g}", type_name(t), apps::to_string(statistics),
                        outlier ? ", outlier first" : "", error);
        MESSAGE(what);
        CHECK(error < (t == f16 ? 2e-3 : 1.6e-2));
      }
}

TEST_CASE("the row rule trades threads per row for runs per thread where more bytes of rows stay resident") {
  // Hidden 2048 in 16-bit types: 64 threads of 4 runs each by row_threads; 32 threads of 8 runs keep the
  // epilogue's vectors and the margin once per thread for twice the row. 1928 columns (241 runs): the same
  // choice with the runs past the row tested. add + RMSNorm keeps two rows: 32 threads would need 96
  // registers by the model, past kMostRowRegisters, so it stays at 64.
  struct Case {
    apps::NormKind kind;
    Type dtype;
    int hidden, threads, blocks;
  };
  const Case cases[] = {
      {apps::NormKind::rmsnorm, f16, 2048, 32, 32},       // 32 + 8 + 24 = 64 registers: 32 blocks, 128 KB
      {apps::NormKind::rmsnorm, bf16, 1928, 32, 32},      // the same, the last runs tested
      {apps::NormKind::softmax, bf16, 1928, 32, 32},      // 32 + 24 = 56: 36 blocks, at most 32
      {apps::NormKind::layernorm, f16, 2048, 32, 28},     // 32 + 16 + 24 = 72: 28 blocks
      {apps::NormKind::add_rmsnorm, bf16, 2048, 64, 16},  // 32 + 32 + 8 + 24 = 96 at 32 threads: kept at 64
  };
  for (const Case &c : cases) {
    const apps::Norm n = apps::make_norm(c.kind, {.dtype = c.dtype, .hidden = c.hidden, .prefix = "tr8_"});
    const Schedule s = apps::schedule_norm(n);
    INFO(std::string(apps::to_string(c.kind)), " ", type_name(c.dtype), " hidden ", c.hidden);
    const LoweredProgram p = lower(n.out, s, Target::sm90a());
    REQUIRE(p.kernels.size() == 1);
    const Kernel &k = p.kernels[0];
    CHECK(k.threads == c.threads);
    CHECK(k.min_blocks_per_sm == c.blocks);
    CHECK(contains(k.schedule_summary, fmt::format("{} threads per row: the block size", c.threads)));
    const std::string source = compile_for_both_targets(p).front();
    CHECK(contains(source, fmt::format("__launch_bounds__({}, {})", c.threads, c.blocks)));
    // The row's accesses: one 16-byte load per run into the registers, ceil(runs / threads) runs per thread,
    // run s of thread t at run s * threads + t of the row; the output stored run by run with 16-byte stores.
    const int runs = (c.hidden / 8 + c.threads - 1) / c.threads;
    CHECK(contains(source, fmt::format("for (int fill_s = 0; fill_s < {}; ++fill_s)", runs)));
    CHECK(contains(source, fmt::format("twist_copy_sync<16>(&tr8_x_regs[(fill_s * 8)], &tr8_x[(((i * {}) + "
                                       "((fill_s * {}) + static_cast<int>(threadIdx.x))) * 8)], 16);",
                                       c.hidden / 8, c.threads)));
    CHECK(contains(source, fmt::format("for (int column_s = 0; column_s < {}; ++column_s)", runs)));
    std::string stored = p.outputs[0].name;  // the first output, as the CUDA source names it
    std::replace(stored.begin(), stored.end(), '.', '_');
    CHECK(contains(source, fmt::format("twist_copy_sync<16>(&{}[(((i * {}) + ((column_s * {}) + "
                                       "static_cast<int>(threadIdx.x))) * 8)]",
                                       stored, c.hidden / 8, c.threads)));
    CHECK(contains(source, fmt::format("< {}))", c.hidden / 8)) == (c.hidden % (c.threads * 8) != 0));
    const std::map<std::string, double> sizes = {{n.rows.name(), 3}};
    Tensors inputs = random_inputs(n.out, sizes, 37);
    const double tolerance = c.dtype == f16 ? 2e-3 : 1.6e-2;
    CHECK(lowered_error(n.out, s, inputs, sizes) < tolerance);
    if (c.kind != apps::NormKind::softmax) continue;
    // A row of -inf: NaN from the oracle and the kernel alike; the other rows exact to the output's rounding.
    for (int e = c.hidden; e < 2 * c.hidden; ++e)
      inputs.at("tr8_x").set_linear(e, -std::numeric_limits<double>::infinity());
    check_elementwise(n.out, s, inputs, sizes, tolerance);
  }
}

TEST_CASE("row kernels ask for as many resident blocks as their rows' registers allow") {
  // Registers per thread: its runs of the rows kept (packed), one per value of the epilogue's 16-byte
  // vectors, and 24 more, rounded up to 8; blocks = 65536 / (threads * that), at most 2048 threads per SM.
  struct Case {
    apps::NormKind kind;
    Type dtype;
    int hidden, threads, blocks;
  };
  const Case cases[] = {
      // 8 runs per thread (the row rule's choice, next test case): 32 + 24 = 56 registers
      {apps::NormKind::softmax, f16, 16384, 256, 4},    {apps::NormKind::softmax, bf16, 4096, 64, 18},  // 56
      {apps::NormKind::rmsnorm, f16, 16384, 256, 4},     // 32 + 8 (w) + 24 = 64
      {apps::NormKind::layernorm, bf16, 8192, 128, 7},   // 32 + 16 (w, b) + 24 = 72
      {apps::NormKind::add_rmsnorm, f16, 2048, 64, 16},  // 4 runs: 32 (x, residual) + 8 + 24 = 64
  };
  for (const Case &c : cases) {
    const apps::Norm n = apps::make_norm(c.kind, {.dtype = c.dtype, .hidden = c.hidden, .prefix = "rb_"});
    Schedule s = apps::schedule_norm(n);
    INFO(std::string(apps::to_string(c.kind)), " ", type_name(c.dtype), " hidden ", c.hidden);
    const LoweredProgram p = lower(n.out, s, Target::sm90a());
    REQUIRE(p.kernels.size() == 1);
    CHECK(p.kernels[0].threads == c.threads);
    CHECK(p.kernels[0].min_blocks_per_sm == c.blocks);
    CHECK(contains(p.kernels[0].schedule_summary, std::to_string(c.blocks) + " blocks per SM asked"));
    CHECK(contains(compile_for_both_targets(p).front(),
                   fmt::format("__launch_bounds__({}, {})", c.threads, c.blocks)));
    // A schedule's min_blocks_per_sm is a floor: a larger one is kept.
    s[n.out].min_blocks_per_sm(c.blocks + 1);
    CHECK(lower(n.out, s, Target::sm90a()).kernels[0].min_blocks_per_sm == c.blocks + 1);
  }
  // A row kept in shared memory asks for nothing: its loads are cp.async copies, not registers.
  Rms odd(77, f16);
  CHECK(lower(odd.y, Schedule(), Target::sm90a()).kernels[0].min_blocks_per_sm == 1);
}

TEST_CASE(
    "approximate exp is a multiply and ex2.approx.ftz; bf16 values widen to f32 by a move into the upper "
    "half") {
  const apps::Norm n =
      apps::make_norm(apps::NormKind::softmax, {.dtype = bf16, .hidden = 256, .prefix = "ax_"});
  const std::string source =
      compile_for_both_targets(lower(n.out, apps::schedule_norm(n), Target::sm90a())).front();
  CHECK(contains(source, "ex2.approx.ftz.f32"));
  CHECK(contains(source, ") * 1.44269504f)"));
  CHECK(!contains(source, "__expf("));
  // In an asm statement (twist_bf16_to_float), so that NVVM widens the row where each use needs it and
  // keeps it packed between the fold and the epilogue.
  CHECK(contains(source, "asm(\"mov.b32 %0, {0, %1};\""));
  CHECK(contains(source, "twist_bf16_to_float(ax_x_regs["));
  CHECK(!contains(source, "__bfloat162float("));
  CHECK(!contains(source, "<< 16)"));
}

TEST_CASE(
    "elementwise kernels move 16-byte vectors, with a scalar fallback where rows are not whole vectors") {
  SizeParam n("vw_n"), m("vw_m");
  Input a("vw_a", f16, {n, m}), b("vw_b", f16, {n, m});
  Var i("i"), j("j");
  Func out("vw_out");
  // b is read one column to the left (the first column twice): not a run of the output's, so a scalar load.
  out(i, j) = cast(f16, cast(f32, a(i, j)) * 2.0f + cast(f32, b(i, max(j - 1, 0))));
  out.set_shape({n, m});
  const LoweredProgram p = lower(out, Schedule(), Target::sm90a());
  REQUIRE(p.kernels.size() == 1);
  const Kernel &k = p.kernels[0];
  REQUIRE(k.requirements.size() == 1);
  REQUIRE(k.fallback);
  CHECK(contains(k.schedule_summary, "1 input run(s) read with 16-byte loads"));
  const std::vector<std::string> sources = compile_for_both_targets(p);
  CHECK(contains(sources[0], "twist_copy_sync<16>(&vw_a_v0[0], &vw_a["));
  CHECK(contains(sources[0], "twist_copy_sync<16>(&vw_out["));
  CHECK(contains(sources[0], "&vw_out_out[0], 16);"));
  CHECK(!contains(sources[1], "twist_copy_sync"));
  for (const int cols : {40, 37, 8}) {
    INFO("cols ", cols);
    const std::map<std::string, double> sizes = {{"vw_n", 5}, {"vw_m", cols}};
    CHECK(&select_variant(k, sizes) == (cols % 8 == 0 ? &k : k.fallback.get()));
    const Tensors inputs = random_inputs(out, sizes, 17);
    CHECK(lowered_error(out, Schedule(), inputs, sizes) < 2e-3);
    if (cols % 8 == 0) continue;
    // Without its requirement the vector kernel's copies would be misaligned, and the interpreter refuses
    // them.
    Kernel unchecked = k;
    unchecked.requirements.clear();
    std::map<std::string, reference::HostTensor> buffers = inputs;
    buffers.emplace("vw_out", reference::HostTensor(f16, {5, cols}));
    const std::string refused = error_of([&] { reference::run_kernel(unchecked, buffers, sizes); });
    CHECK(contains(refused, "16-byte copy"));
    CHECK(contains(refused, "is not 16-byte aligned"));
  }
}

TEST_CASE("bad pipeline schedules are refused naming the func, the loop and the budget") {
  {
    Rms n(64, f16);
    Schedule missing;
    missing[n.ss].compute_at(n.y, "k");
    const std::string no_loop = error_of([&] { lower(n.y, missing, Target::sm90a()); });
    CHECK(contains(no_loop, "'rms_ss'"));
    CHECK(contains(no_loop, "loop 'k'"));
    CHECK(contains(no_loop, "i, j"));
  }
  {
    Rms wide(70000, f32);
    Schedule at_row;
    at_row[wide.ss].compute_at(wide.y, wide.i);
    const std::string too_wide = error_of([&] { lower(wide.y, at_row, Target::sm90a()); });
    CHECK(contains(too_wide, "'rms_ss'"));
    CHECK(contains(too_wide, "loop 'i'"));
    INFO(too_wide);
    CHECK(contains(too_wide, "280000"));                    // 70000 f32 of the row of x
    CHECK(contains(too_wide, std::to_string(227 * 1024)));  // the budget
    // Unscheduled, the same program reads x again instead.
    CHECK(lower(wide.y, Schedule(), Target::sm90a()).kernels.size() == 1);
  }

  SizeParam len("na_len");
  Input x("na_x", f32, {len});
  Var i("i");
  RDom r({{0, len}}, "na_r");
  const Monoid difference =
      MonoidBuilder("tree_difference")
          .state({{"v", f32}})
          .identity({0.0f})
          .combine([](const State &a, const State &b) { return std::vector<Expr>{a[0] - b[0]}; })
          .build();
  Func f("na_f");
  f(i) = reduce(difference, r, x(r.x + i * 0));
  f.set_shape({1});
  Schedule tree;
  tree[f].split("na_r.x", "ro", "rt", 32).bind("rt", Binding::thread);
  const std::string refused = error_of([&] { lower(f, tree, Target::sm90a()); });
  CHECK(contains(refused, "cooperative tree of na_f"));
  CHECK(contains(refused, "counterexample"));
}

TEST_CASE("the norms of apps/norms match the oracle on the interpreter, each in one kernel") {
  for (const Type &t : {f16, bf16})
    for (const apps::NormKind kind : apps::all_norm_kinds())
      for (const int hidden : {77, 256}) {
        const apps::Norm n =
            apps::make_norm(kind, {.dtype = t, .hidden = hidden, .eps = 1e-6f, .prefix = "in_"});
        const Schedule s = apps::schedule_norm(n);
        const LoweredProgram p = lower(n.out, s, Target::sm90a());
        INFO(std::string(apps::to_string(kind)), " ", type_name(t), " hidden ", hidden);
        REQUIRE(p.kernels.size() == 1);
        // Each input element is read once: SwiGLU's x in two loads, of the gate's half and of the up half.
        for (const Input &in : n.inputs)
          CHECK(global_reads(p.kernels[0], in.name()) == (kind == apps::NormKind::swiglu ? 2 : 1));
        const std::map<std::string, double> sizes = {{n.rows.name(), 3}};
        CHECK(lowered_error(n.out, s, random_inputs(n.out, sizes, 21), sizes) < (t == f16 ? 2e-3 : 1.6e-2));
      }
}

TEST_CASE("rows read again: every norm re-reads x by 16-byte runs in each pass, keeps no row, and matches") {
  // RowForm::reread: no register array and no shared memory holds the row; each tree's fold and the epilogue
  // load their runs of x from global memory again. 264 columns: runs that do not tile the row (a thread's
  // second run past it), 256 and 1024: runs that do, at the rule's threads and at 64 threads per row.
  struct Case {
    apps::NormKind kind;
    apps::LayerNormStatistics statistics;
  };
  std::vector<Case> cases;
  for (const apps::NormKind kind : apps::all_norm_kinds())
    if (kind != apps::NormKind::swiglu) cases.push_back({kind, apps::LayerNormStatistics::two_pass});
  cases.push_back({apps::NormKind::layernorm, apps::LayerNormStatistics::welford});
  cases.push_back({apps::NormKind::layernorm, apps::LayerNormStatistics::shifted_sums});
  for (const Type &t : {f16, bf16})
    for (const Case &c : cases)
      for (const int hidden : {264, 256, 1024})
        for (const int threads : {0, 64}) {
          const apps::Norm n = apps::make_norm(
              c.kind,
              {.dtype = t, .hidden = hidden, .eps = 1e-6f, .prefix = "rr_", .layernorm = c.statistics});
          Schedule s = apps::schedule_norm(n);
          s[n.out].row_form(RowForm::reread, threads);
          const LoweredProgram p = lower(n.out, s, Target::sm90a());
          INFO(std::string(apps::to_string(c.kind)), " ", type_name(t), " hidden ", hidden, " threads ",
               threads);
          REQUIRE(p.kernels.size() == 1);
          const Kernel &k = p.kernels[0];
          if (threads) CHECK(k.threads == threads);
          const std::string x = "rr_x";
          CHECK(contains(k.schedule_summary,
                         "input '" + x + "': its row of " + std::to_string(hidden) +
                             " elements not kept: each pass and the epilogue read it again"));
          CHECK(!contains(k.schedule_summary, "read once into"));
          CHECK(k.shared_bytes < 1024);  // only the trees' arrays
          // x is read by each tree and by the epilogue (add + RMSNorm: x and the residual alike).
          const int passes = static_cast<int>(n.reductions.size()) + 1;
          CHECK(global_reads(k, x) >= passes);
          const std::string source = compile_for_both_targets(p).front();
          CHECK(!contains(source, "_regs["));
          // Every read of x is a 16-byte copy into a run's register array (shifted sums' x(i, 0) aside).
          size_t copies = 0;
          for (size_t at = source.find("], &rr_x["); at != std::string::npos;
               at = source.find("], &rr_x[", at + 1))
            ++copies;
          CHECK(copies == static_cast<size_t>(passes));
          const std::map<std::string, double> sizes = {{n.rows.name(), 3}};
          CHECK(lowered_error(n.out, s, random_inputs(n.out, sizes, 29), sizes) < (t == f16 ? 2e-3 : 1.6e-2));
        }
}

TEST_CASE("a row read again asks for the blocks per SM that the same row kept in registers does") {
  // Its passes' runs are unrolled and their loads issued together, so a thread holds its runs within a pass:
  // the model counts them as it counts a kept row (asked for less, ptxas spilled 8 to 20 bytes).
  for (const apps::NormKind kind :
       {apps::NormKind::rmsnorm, apps::NormKind::add_rmsnorm, apps::NormKind::layernorm})
    for (const int threads : {256, 512}) {
      const apps::Norm n = apps::make_norm(kind, {.dtype = bf16, .hidden = 16384, .prefix = "rb_"});
      int blocks[2] = {0, 0};
      for (const RowForm form : {RowForm::registers, RowForm::reread}) {
        Schedule s = apps::schedule_norm(n);
        s[n.out].row_form(form, threads);
        blocks[form == RowForm::reread] = lower(n.out, s, Target::sm90a()).kernels[0].min_blocks_per_sm;
      }
      INFO(std::string(apps::to_string(kind)), " threads ", threads);
      CHECK(blocks[0] > 1);
      CHECK(blocks[0] == blocks[1]);
    }
}

TEST_CASE("row_form takes a power of two from 32 to 1024 threads per row") {
  const apps::Norm n =
      apps::make_norm(apps::NormKind::rmsnorm, {.dtype = f16, .hidden = 256, .prefix = "rf_"});
  Schedule s;
  CHECK(
      contains(error_of([&] { s[n.out].row_form(RowForm::reread, 48); }), "a power of two from 32 to 1024"));
  // The registers form at a block size the schedule names: the row stays in registers.
  s = apps::schedule_norm(n);
  s[n.out].row_form(RowForm::registers, 32);
  const Kernel k = lower(n.out, s, Target::sm90a()).kernels[0];
  CHECK(k.threads == 32);
  CHECK(contains(k.schedule_summary, "read once into registers"));
}

TEST_CASE("two instances of one op, and two programs, may use the same func and input names") {
  const apps::Norm narrow =
      apps::make_norm(apps::NormKind::rmsnorm, {.dtype = f16, .hidden = 40, .eps = 1e-6f, .prefix = ""});
  const apps::Norm wide =
      apps::make_norm(apps::NormKind::rmsnorm, {.dtype = f16, .hidden = 72, .eps = 1e-6f, .prefix = ""});
  for (const apps::Norm *n : {&narrow, &wide}) {
    const std::map<std::string, double> sizes = {{n->rows.name(), 2}};
    CHECK(lowered_error(n->out, apps::schedule_norm(*n), random_inputs(n->out, sizes, 4), sizes) < 2e-3);
    CHECK(
        lower(n->out, Schedule(), Target::sm90a()).inputs[0].shape[1].as<Halide::Internal::IntImm>()->value ==
        n->options.hidden);
  }
  // Within one program, two different funcs of one name are refused.
  Input x("dup_x", f32, {Expr(4)});
  Var i("i");
  Func a("dup"), b("dup"), out("dup_out");
  a(i) = x(i) + 1.0f;
  b(i) = x(i) * 2.0f;
  out(i) = a(i) + b(i);
  out.set_shape({Expr(4)});
  const std::string msg = error_of([&] { lower(out, Schedule(), Target::sm90a()); });
  CHECK(contains(msg, "two different funcs or inputs named 'dup'"));
}

TEST_CASE("a reduction read by another reduction is a stage of its own, its extent inferred from the reads") {
  SizeParam rows("st_rows"), cols("st_cols");
  Input x("st_x", f32, {rows, cols});
  Var i("i"), o("o");
  RDom r({{0, cols}}, "st_r"), q({{1, rows - 1}}, "st_q");
  Func row_max("st_row_max"), total("st_total");
  row_max(i) = reduce(algebra::max(f32), r, x(i, r.x));
  total(o) = reduce(algebra::sum(f32), q, row_max(q.x) * cast(f32, o + 1));  // rows 1.. only
  total.set_shape({Expr(2)});
  const LoweredProgram p = lower(total, Schedule(), Target::sm90a());
  REQUIRE(p.kernels.size() == 2);
  REQUIRE(p.workspaces.size() == 1);
  CHECK(p.workspaces[0].name == "st_row_max");
  CHECK(Halide::Internal::can_prove(p.workspaces[0].shape[0] == rows));  // the bounds of q.x: [1, rows - 1]
  const std::map<std::string, double> sizes = {{"st_rows", 5}, {"st_cols", 70}};
  CHECK(lowered_error(total, Schedule(), random_inputs(total, sizes, 12), sizes) < 1e-6);
}

TEST_CASE("trees and row kernels keep a domain's predicates") {
  SizeParam rows("pr_rows"), cols("pr_cols");
  Input x("pr_x", f32, {rows, cols});
  Var i("i"), j("j");
  RDom all({{0, cols}}, "pr_r");
  const RDom r = all.where(all.x % 3 != 0 && all.x <= i + 40);
  Func s("pr_s"), y("pr_y");
  s(i) = reduce(algebra::welford(f32), r, x(i, r.x));
  y(i, j) = x(i, j) - s(i)[0];
  y.set_shape({rows, cols});
  for (const int c : {1, 50, 200}) {
    const std::map<std::string, double> sizes = {{"pr_rows", 3}, {"pr_cols", c}};
    CHECK(lowered_error(y, Schedule(), random_inputs(y, sizes, 13), sizes) < 1e-5);
  }
  s.set_shape({rows});
  Schedule bound;
  bound[s].split("pr_r.x", "ro", "rt", 64).bind("rt", Binding::thread);
  const std::map<std::string, double> sizes = {{"pr_rows", 3}, {"pr_cols", 150}};
  CHECK(lowered_error(s, bound, random_inputs(s, sizes, 14), sizes) < 1e-5);
}

TEST_CASE("rows of several dimensions, and a whole func as one row") {
  SizeParam b("rd_b"), h("rd_h"), n("rd_n");
  Input x("rd_x", f32, {b, h, n});
  Var i("i"), j("j"), k("k");
  RDom r({{0, n}}, "rd_r");
  Func peak("rd_peak"), y("rd_y");
  peak(i, j) = reduce(algebra::max(f32), r, x(i, j, r.x));
  y(i, j, k) = x(i, j, k) - peak(i, j);
  y.set_shape({b, h, n});
  const std::map<std::string, double> sizes = {{"rd_b", 2}, {"rd_h", 3}, {"rd_n", 41}};
  // One block per (i, j): the rows are the two dimensions the reduction's point depends on.
  CHECK(Halide::Internal::can_prove(lower(y, Schedule(), Target::sm90a()).kernels[0].grid[0] ==
                                    Expr(b) * Expr(h)));
  CHECK(lowered_error(y, Schedule(), random_inputs(y, sizes, 15), sizes) < 1e-6);

  Input v("rd_v", f32, {n});
  RDom q({{0, n}}, "rd_q");
  Func total("rd_total"), unit("rd_unit");
  total() = reduce(algebra::sum(f32), q, abs(v(q.x)));
  unit(i) = v(i) / total();
  unit.set_shape({n});
  const LoweredProgram p = lower(unit, Schedule(), Target::sm90a());
  REQUIRE(p.kernels.size() == 1);
  CHECK(Halide::Internal::is_const_one(p.kernels[0].grid[0]));  // one block: the whole func is the row
  const std::map<std::string, double> one = {{"rd_n", 1000}};
  CHECK(lowered_error(unit, Schedule(), random_inputs(unit, one, 16), one) < 1e-6);
}

TEST_CASE("a monoid that does not commute keeps its points' order in trees and in split combines") {
  // The affine maps h -> a h + b compose in sequence order only: a lowering that folds points out of order
  // (threads dealt points in turn, lanes combined high bit first, split parts combined in interleaved chains)
  // gives another map.
  SizeParam rows("ord_rows"), cols("ord_cols");
  Input a("ord_a", f64, {rows, cols}), b("ord_b", f64, {rows, cols});
  Var i("i");
  RDom r({{0, cols}}, "ord_r");
  Func f("ord_f");
  f(i) = reduce(algebra::affine(f64), r, std::vector<Expr>{a(i, r.x), b(i, r.x)});
  f.set_shape({rows});
  REQUIRE_FALSE(algebra::affine(f64).commutative);
  Schedule by_default, split_parts;
  split_parts[f]
      .split("i", "io", "it", 32)
      .bind("io", Binding::block_x)
      .bind("it", Binding::thread)
      .split_reduction("ord_r.x", 8);
  for (const Schedule *s : {&by_default, &split_parts}) {
    for (const int n : {1, 37, 1000}) {
      INFO("length ", n);
      const std::map<std::string, double> sizes = {{"ord_rows", 3}, {"ord_cols", n}};
      CHECK(lowered_error(f, *s, random_inputs(f, sizes, 11), sizes) < 1e-9);
    }
  }
  Schedule lanes_inside;
  lanes_inside[f].split("ord_r.x", "ro", "rt", 32).bind("rt", Binding::thread);
  const std::string error = error_of([&] { lower(f, lanes_inside, Target::sm90a()); });
  CHECK(contains(error, "not known to be commutative"));
  CHECK(contains(error, "ord_f"));
}
