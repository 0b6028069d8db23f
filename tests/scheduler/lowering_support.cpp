#include "tests/scheduler/lowering_support.h"

#include <doctest/doctest.h>

#include "algebra/builtins.h"
#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/cuda/runtime/kernel_cache.h"
#include "backends/reference/evaluate_funcs.h"
#include "backends/reference/interpreter/interpreter.h"
#include "lang/graph.h"
#include "scheduler/arguments.h"
#include "scheduler/lower.h"
#include "scheduler/wide_offsets.h"

namespace twist::testing {

Tensors random_inputs(const Func &output, const std::map<std::string, double> &sizes, uint64_t seed) {
  Tensors inputs;
  for (const Input &in : walk({output}).inputs) {
    std::vector<Halide::Expr> shape = to_halide(in.shape());
    inputs.emplace(in.name(), reference::random_normal(in.type(), evaluate_shape(shape, sizes), seed++));
  }
  return inputs;
}

AffineRows affine_rows(const std::string &prefix) {
  SizeParam rows(prefix + "_rows"), cols(prefix + "_cols");
  Input a(prefix + "_a", f64, {rows, cols}), b(prefix + "_b", f64, {rows, cols});
  Var i("i");
  RDom r({{0, cols}}, prefix + "_r");
  Func f(prefix + "_f");
  f(i) = reduce(algebra::affine(f64), r, std::vector<Expr>{a(i, r.x), b(i, r.x)});
  f.set_shape({rows});
  return {a, b, f};
}

double lowered_error(const Func &output, const Schedule &schedule, const Tensors &inputs,
                     const std::map<std::string, double> &scalars, const reference::InterpretOptions &options,
                     bool wide_offsets) {
  const LoweredProgram lowered = lower(output, schedule, Target::sm90a());
  const LoweredProgram program = wide_offsets ? force_wide_offsets(lowered) : lowered;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto &[name, t] : inputs) shapes[name] = t.shape();
  const Scalars bound = bind_arguments(program, shapes, scalars);
  const auto got = reference::run_program(program, inputs, bound, options);
  const auto want = reference::evaluate(output, {inputs, scalars}, Arithmetic::exact);
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t o = 0; o < want.size(); ++o) {
    const reference::HostTensor &g = got.at(program.outputs[o].name);
    reference::HostTensor as_f64(f64, g.shape());
    for (int64_t e = 0; e < g.size(); ++e) as_f64.set_linear(e, g.get_linear(e));
    worst = std::max(worst, reference::relative_l2_error(as_f64, want[o]));
  }
  return worst;
}

std::vector<std::string> compile_for_both_targets(const LoweredProgram &program) {
  std::vector<std::string> sources;
  std::vector<const Kernel *> kernels;
  for (const Kernel &k : program.kernels)
    for (const Kernel *v = &k; v; v = v->fallback.get()) kernels.push_back(v);
  for (const Kernel *k : kernels) {
    const std::string source = cuda::cuda_source(*k);
    for (const char *arch : {"sm_80", "sm_90a"}) {
      const cuda::CompileResult r = cuda::default_kernel_cache().compile(source, k->name + ".cu", {arch});
      CHECK_MESSAGE(!r.cubin.empty(), k->name << " for " << arch);
    }
    // CUDA's thread and block indices are unsigned; the IR's are signed, so every use must convert
    // (an unsigned j - i is a huge number, as an ALiBi bias once found out on the GPU).
    for (const char *index : {"threadIdx.x", "blockIdx.x", "blockIdx.y", "blockIdx.z"})
      for (size_t at = source.find(index); at != std::string::npos; at = source.find(index, at + 1))
        CHECK_MESSAGE(source.compare(at - 17, 17, "static_cast<int>(") == 0,
                      k->name << " uses " << index << " unsigned");
    for (const std::string &instruction : k->required_instructions)
      CHECK_MESSAGE(source.find(instruction) != std::string::npos, k->name << " lacks " << instruction);
    sources.push_back(source);
  }
  return sources;
}

reference::InterpretOptions in_block_order(reference::InterpretOptions::BlockOrder order) {
  reference::InterpretOptions o;
  o.block_order = order;
  return o;
}

const char *block_order_name(reference::InterpretOptions::BlockOrder order) {
  using BlockOrder = reference::InterpretOptions::BlockOrder;
  return order == BlockOrder::in_order ? "in order" : order == BlockOrder::reversed ? "reversed" : "shuffled";
}

}  // namespace twist::testing
