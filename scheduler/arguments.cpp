#include "scheduler/arguments.h"

#include <algorithm>
#include <limits>
#include <set>

#include "lang/error.h"
#include "lang/evaluate.h"
#include "scheduler/wide_offsets.h"

namespace twist {

using namespace Halide::Internal;

int64_t evaluate_int(const Halide::Expr &e, const Scalars &scalars) {
  ExprCompiler compiler(Arithmetic::exact);
  Slots slots;
  for (const auto &[name, value] : scalars) {
    const int s = compiler.slot(name);
    if (static_cast<int>(slots.size()) <= s) slots.resize(s + 1);
    slots[s] = value;
  }
  CompiledExpr f = compiler.compile(e);
  slots.resize(compiler.num_slots());
  return static_cast<int64_t>(f(slots));
}

std::vector<int64_t> evaluate_shape(const std::vector<Halide::Expr> &shape, const Scalars &scalars) {
  std::vector<int64_t> out;
  for (const Halide::Expr &e : shape) out.push_back(evaluate_int(e, scalars));
  return out;
}

Scalars bind_arguments(const LoweredProgram &program,
                       const std::map<std::string, std::vector<int64_t>> &input_shapes,
                       const Scalars &given) {
  Scalars bound = given;
  std::map<std::string, std::string> bound_from;
  for (const auto &[name, v] : given) bound_from[name] = "given";
  for (const BufferArg &in : program.inputs) {
    auto it = input_shapes.find(in.name);
    if (it == input_shapes.end())
      fail("program '{}' needs input '{}', which was not given", program.name, in.name);
    const std::vector<int64_t> &shape = it->second;
    if (shape.size() != in.shape.size())
      fail("input '{}' of program '{}' has rank {}, but a tensor of rank {} was given", in.name, program.name,
           in.shape.size(), shape.size());
    for (size_t d = 0; d < shape.size(); ++d) {
      const std::string where = fmt::format("input '{}' dimension {}", in.name, d);
      if (const auto *v = in.shape[d].as<Variable>(); v && !bound.count(v->name)) {
        bound[v->name] = static_cast<double>(shape[d]);
        bound_from[v->name] = where;
      }
    }
  }
  for (const ScalarArg &s : program.scalars)
    if (!bound.count(s.name))
      fail("program '{}' needs the scalar '{}', which was not given and is no input's extent", program.name,
           s.name);
  for (const BufferArg &in : program.inputs) {
    const std::vector<int64_t> &shape = input_shapes.at(in.name);
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t want = evaluate_int(in.shape[d], bound);
      if (want != shape[d]) {
        const auto *v = in.shape[d].as<Variable>();
        fail("input '{}' dimension {} has extent {}, but {} is {}{}", in.name, d, shape[d], in.shape[d], want,
             v ? fmt::format(" (from {})", bound_from[v->name]) : "");
      }
    }
  }
  return bound;
}

namespace {

bool requirements_hold(const Kernel &kernel, const Scalars &scalars) {
  for (const Requirement &r : kernel.requirements)
    if (evaluate_int(Halide::cast(Halide::Int(32), r.condition), scalars) == 0) return false;
  return true;
}

}  // namespace

std::set<std::string> buffers_past_32_bit_offsets(const Kernel &kernel, const Scalars &scalars) {
  std::set<std::string> past;
  for (const BufferArg &b : kernel.buffers) {
    if (std::find(kernel.wide_offsets.begin(), kernel.wide_offsets.end(), b.name) !=
        kernel.wide_offsets.end())
      continue;  // 64-bit offsets: any size
    int64_t elements = 1;
    for (int64_t e : evaluate_shape(b.shape, scalars)) elements *= e;
    if (elements > std::numeric_limits<int32_t>::max()) past.insert(b.name);
  }
  return past;
}

bool offsets_fit(const Kernel &kernel, const Scalars &scalars) {
  return buffers_past_32_bit_offsets(kernel, scalars).empty();
}

const Kernel &select_variant(const Kernel &kernel, const Scalars &scalars) {
  if (requirements_hold(kernel, scalars) || !kernel.fallback) {
    check_requirements(kernel, scalars);
    if (kernel.wide_variants) {
      const std::set<std::string> past = buffers_past_32_bit_offsets(kernel, scalars);
      if (!past.empty()) return wide_variant(kernel, past);
    }
    return kernel;
  }
  return select_variant(*kernel.fallback, scalars);
}

void check_requirements(const Kernel &kernel, const Scalars &scalars) {
  for (const Requirement &r : kernel.requirements) {
    if (evaluate_int(Halide::cast(Halide::Int(32), r.condition), scalars) != 0) continue;
    std::string values;
    for (const auto &[name, v] : scalars)
      values += fmt::format("{}{} = {}", values.empty() ? "" : ", ", name, v);
    fail("kernel {} cannot run on these shapes: {} does not hold ({}); {}", kernel.name, r.condition, values,
         r.why);
  }
}

}  // namespace twist
