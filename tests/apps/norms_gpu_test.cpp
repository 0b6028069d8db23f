// The norms of apps/norms and programs with no schedule on the GPU, against the algorithm oracle.
#include <doctest/doctest.h>

#include "algebra/builtins.h"
#include "algebra/online.h"
#include "apps/norms/norms.h"
#include "backends/cuda/program/gpu_program.h"
#include "backends/reference/evaluate_funcs.h"
#include "scheduler/arguments.h"
#include "scheduler/lower.h"
#include "tests/gpu_support.h"

using namespace twist;
using namespace twist::apps;
using reference::HostTensor;

namespace {

// The worst relative L2 error over the program's outputs, run on the GPU, against the exact oracle.
double gpu_error(const Func &out, const Schedule &s, const std::map<std::string, HostTensor> &inputs,
                 const std::map<std::string, double> &scalars) {
  static cuda::Device device;
  const LoweredProgram p = lower(out, s, Target::sm90a());
  cuda::GpuProgram gpu(p, device);
  const auto got = gpu.run(inputs, scalars);
  const auto want = reference::evaluate(out, {inputs, scalars}, Arithmetic::exact);
  double worst = 0;
  for (size_t o = 0; o < want.size(); ++o) {
    const HostTensor &g = got.at(p.outputs[o].name);
    HostTensor wide(f64, g.shape());
    for (int64_t e = 0; e < g.size(); ++e) wide.set_linear(e, g.get_linear(e));
    worst = std::max(worst, reference::relative_l2_error(wide, want[o]));
  }
  return worst;
}

// Fresh N(0, 1) values for each input of `n` at `rows` rows, the k-th input's drawn with seed first_seed + k.
std::map<std::string, HostTensor> random_norm_inputs(const Norm &n, const Type &t, int rows,
                                                     uint64_t first_seed) {
  std::map<std::string, HostTensor> inputs;
  uint64_t seed = first_seed;
  for (const Input &in : n.inputs) {
    const std::vector<int64_t> shape = evaluate_shape(to_halide(in.shape()), {{n.rows.name(), rows}});
    inputs.emplace(in.name(), reference::random_normal(t, shape, seed++));
  }
  return inputs;
}

}  // namespace

TEST_CASE(
    "GPU: the norms of apps/norms (softmax and LayerNorm and RMSNorm and add + RMSNorm and SwiGLU) match the "
    "oracle in f16 and bf16") {
  TWIST_REQUIRE_GPU();
  for (const Type &t : {f16, bf16})
    for (const NormKind kind : all_norm_kinds())
      for (const int hidden : {16384, 4096, 1000, 77}) {
        const Norm n = make_norm(kind, {.dtype = t, .hidden = hidden, .eps = 1e-6f, .prefix = "gpu_"});
        const int rows = 37;
        const std::map<std::string, HostTensor> inputs = random_norm_inputs(n, t, rows, 1);
        INFO(to_string(kind), " ", type_name(t), " hidden ", hidden);
        CHECK(gpu_error(n.out, schedule_norm(n), inputs, {{n.rows.name(), rows}}) <
              (t == f16 ? 2e-3 : 1.6e-2));
      }
}

TEST_CASE("GPU: the norms with rows read again by each pass (RowForm::reread) match the oracle") {
  TWIST_REQUIRE_GPU();
  for (const Type &t : {f16, bf16})
    for (const NormKind kind : all_norm_kinds())
      for (const int hidden : {16384, 4096, 1000}) {
        if (kind == NormKind::swiglu) continue;  // elementwise: no row kernel
        const Norm n = make_norm(kind, {.dtype = t, .hidden = hidden, .eps = 1e-6f, .prefix = "gpu_rr_"});
        const int rows = 37;
        const std::map<std::string, HostTensor> inputs = random_norm_inputs(n, t, rows, 31);
        Schedule s = schedule_norm(n);
        s[n.out].row_form(RowForm::reread);
        INFO(to_string(kind), " ", type_name(t), " hidden ", hidden);
        CHECK(gpu_error(n.out, s, inputs, {{n.rows.name(), rows}}) < (t == f16 ? 2e-3 : 1.6e-2));
      }
}

TEST_CASE("GPU: LayerNorm by the Welford monoid and elementwise 16-byte vectors with their scalar fallback") {
  TWIST_REQUIRE_GPU();
  for (const int hidden : {4096, 1000}) {
    const Norm n = make_norm(NormKind::layernorm, {.dtype = bf16,
                                                   .hidden = hidden,
                                                   .eps = 1e-6f,
                                                   .prefix = "gpu_wf_",
                                                   .layernorm = LayerNormStatistics::welford});
    const std::map<std::string, HostTensor> inputs = {
        {"gpu_wf_x", reference::random_normal(bf16, {37, hidden}, 11)},
        {"gpu_wf_w", reference::random_normal(bf16, {hidden}, 12)},
        {"gpu_wf_b", reference::random_normal(bf16, {hidden}, 13)}};
    INFO("hidden ", hidden);
    CHECK(gpu_error(n.out, schedule_norm(n), inputs, {{n.rows.name(), 37}}) < 1.6e-2);
  }
  SizeParam rows("gpu_vw_n"), cols("gpu_vw_m");
  Input a("gpu_vw_a", f16, {rows, cols}), b("gpu_vw_b", f16, {rows, cols});
  Var i("i"), j("j");
  Func out("gpu_vw_out");
  out(i, j) = cast(f16, cast(f32, a(i, j)) * 2.0f + cast(f32, b(i, max(j - 1, 0))));
  out.set_shape({rows, cols});
  for (const int m : {1000, 1001}) {  // the vector kernel, then its fallback
    const std::map<std::string, HostTensor> ab = {{"gpu_vw_a", reference::random_normal(f16, {33, m}, 14)},
                                                  {"gpu_vw_b", reference::random_normal(f16, {33, m}, 15)}};
    INFO("columns ", m);
    CHECK(gpu_error(out, Schedule(), ab, {}) < 2e-3);
  }
}

TEST_CASE(
    "GPU: programs with no schedule run (RMSNorm and a tree split across blocks and contractions in f32 and "
    "f16)") {
  TWIST_REQUIRE_GPU();
  {
    const Norm n =
        make_norm(NormKind::rmsnorm, {.dtype = f16, .hidden = 333, .eps = 1e-6f, .prefix = "gpu_ns_"});
    const std::map<std::string, HostTensor> inputs = {
        {"gpu_ns_x", reference::random_normal(f16, {50, 333}, 3)},
        {"gpu_ns_w", reference::random_normal(f16, {333}, 4)}};
    CHECK(gpu_error(n.out, Schedule(), inputs, {{n.rows.name(), 50}}) < 2e-3);
  }
  SizeParam rows("gpu_rows"), cols("gpu_cols");
  Input x("gpu_x", f32, {rows, cols});
  Var i("i"), j("j");
  RDom r({{0, cols}}, "gpu_r");
  Func f("gpu_f");
  f(i) = reduce(algebra::welford(f32), r, x(i, r.x));
  f.set_shape({rows});
  Schedule split;
  split[f].split("gpu_r.x", "ro", "rt", 128).bind("rt", Binding::thread).split_reduction("ro", 8);
  const std::map<std::string, HostTensor> xs = {{"gpu_x", reference::random_normal(f32, {5, 100000}, 5)}};
  CHECK(gpu_error(f, split, xs, {}) < 1e-4);
  CHECK(gpu_error(f, Schedule(), xs, {}) < 1e-4);

  SizeParam M("gpu_M"), N("gpu_N"), K("gpu_K");
  Input a("gpu_a", f32, {M, K}), b("gpu_b", f32, {K, N});
  RDom k({{0, K}}, "gpu_k");
  Func c("gpu_c");
  c(i, j) = reduce(algebra::sum(f32), k, a(i, k.x) * b(k.x, j));
  c.set_shape({M, N});
  const std::map<std::string, HostTensor> ab = {{"gpu_a", reference::random_normal(f32, {33, 300}, 6)},
                                                {"gpu_b", reference::random_normal(f32, {300, 17}, 7)}};
  CHECK(gpu_error(c, Schedule(), ab, {}) < 1e-5);

  // In f16 the default is the tensor-core schedule.
  Input ah("gpu_ah", f16, {M, K}), bh("gpu_bh", f16, {K, N});
  Func ch("gpu_ch");
  ch(i, j) = reduce(algebra::sum(f32), k, cast(f32, ah(i, k.x)) * cast(f32, bh(k.x, j)));
  ch.set_shape({M, N});
  const std::map<std::string, HostTensor> abh = {{"gpu_ah", reference::random_normal(f16, {300, 200}, 8)},
                                                 {"gpu_bh", reference::random_normal(f16, {200, 260}, 9)}};
  CHECK(gpu_error(ch, Schedule(), abh, {}) < 1e-5);
}
