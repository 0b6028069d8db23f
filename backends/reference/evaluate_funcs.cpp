#include "backends/reference/evaluate_funcs.h"

#include <array>
#include <cmath>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>

#include "lang/error.h"
#include "lang/param.h"

namespace twist::reference {

using namespace Halide::Internal;

namespace {

std::string show(const Halide::Expr &e) {
  return fmt::format("{}", e);
}

std::string shape_of(const Input &in) {
  std::string s;
  for (const Expr &e : in.shape()) s += (s.empty() ? "" : ", ") + show(e);
  return "[" + s + "]";
}

// The parameters an expression reads, in order of first use.
std::vector<std::string> params_in(const Halide::Expr &e) {
  struct Collect : IRVisitor {
    std::vector<std::string> names;
    using IRVisitor::visit;
    void visit(const Variable *v) override {
      if (is_param(v) && std::find(names.begin(), names.end(), v->name) == names.end())
        names.push_back(v->name);
    }
  } collect;
  e.accept(&collect);
  return collect.names;
}

// The value of an expression over parameters only (an extent), in exact arithmetic. `what` says where it
// comes from, for the message when a parameter it needs has no value.
Real parameter_expr_value(const Halide::Expr &e, const std::map<std::string, Real> &values,
                          const std::string &what) {
  ExprCompiler compiler(Arithmetic::exact);
  std::vector<std::pair<int, Real>> bound;
  for (const std::string &name : params_in(e)) {
    auto it = values.find(name);
    if (it == values.end())
      fail("{} is `{}`, which needs '{}'; no input shape binds it directly, so pass it in Arguments::scalars",
           what, show(e), name);
    bound.emplace_back(compiler.slot(name), it->second);
  }
  CompiledExpr f = compiler.compile(e);
  Slots slots(compiler.num_slots());
  for (const auto &[k, value] : bound) slots[k] = value;
  return f(slots);
}

int64_t integral(double value, const std::string &what) {
  if (value != std::trunc(value) || std::fabs(value) > 2147483647.0)
    fail("{} is {}, but it must be an i32 integer", what, value);
  return static_cast<int64_t>(value);
}

}  // namespace

std::map<std::string, int64_t> bind_sizes(const FuncGraph &graph, const Arguments &args) {
  std::map<std::string, int64_t> sizes;
  std::map<std::string, std::string> source;  // where each binding came from, for messages
  for (const ParamInfo &p : graph.params) {
    auto it = args.scalars.find(p.name);
    if (p.type != i32 || it == args.scalars.end()) continue;
    sizes[p.name] = integral(it->second, fmt::format("scalar '{}'", p.name));
    source[p.name] = fmt::format("scalar '{}'", p.name);
  }

  struct Derived {
    std::string input;
    int dimension;
    Expr extent;
    int64_t actual;
  };
  std::vector<Derived> derived;  // extents that are not a bare parameter: checked once all are bound
  for (const Input &in : graph.inputs) {
    auto it = args.inputs.find(in.name());
    if (it == args.inputs.end())
      fail("missing input '{}' ({}{}): the program reads it; pass it in Arguments::inputs", in.name(),
           type_name(in.type()), shape_of(in));
    const HostTensor &t = it->second;
    if (t.type() != in.type())
      fail("input '{}' is declared {}{} but was given a {} tensor; convert it to {} first", in.name(),
           type_name(in.type()), shape_of(in), type_name(t.type()), type_name(in.type()));
    if (t.rank() != in.rank())
      fail("input '{}' is declared with rank {} ({}) but was given a tensor of rank {} (shape {})", in.name(),
           in.rank(), shape_of(in), t.rank(), shape_string(t.shape()));
    for (int d = 0; d < in.rank(); ++d) {
      const Expr &extent = in.shape()[d];
      const int64_t actual = t.shape()[d];
      const auto *v = extent.as<Variable>();
      if (!v || !is_param(v)) {
        derived.push_back({in.name(), d, extent, actual});
        continue;
      }
      const std::string here = fmt::format("input '{}' dimension {}", in.name(), d);
      auto bound = sizes.find(v->name);
      if (bound == sizes.end()) {
        sizes[v->name] = actual;
        source[v->name] = here;
      } else if (bound->second != actual) {
        fail("{} has extent {}, but {} is {} (from {})", here, actual, v->name, bound->second,
             source[v->name]);
      }
    }
  }

  std::map<std::string, Real> values(sizes.begin(), sizes.end());
  for (const Derived &d : derived) {
    const std::string here = fmt::format("input '{}' dimension {}", d.input, d.dimension);
    const Real want = parameter_expr_value(d.extent, values, "the extent of " + here);
    if (want != d.actual)
      fail("{} has extent {}, but its declared extent `{}` is {}", here, d.actual, show(d.extent),
           static_cast<double>(want));
  }
  return sizes;
}

namespace {

// Points of a func, as keys of its memo (looked up by span, so a lookup allocates nothing).
struct PointHash {
  using is_transparent = void;
  size_t operator()(std::span<const int64_t> point) const {
    size_t h = 0xcbf29ce484222325ull;
    for (int64_t x : point) h = (h ^ static_cast<size_t>(x)) * 0x100000001b3ull;
    return h;
  }
};
struct PointEqual {
  using is_transparent = void;
  bool operator()(std::span<const int64_t> a, std::span<const int64_t> b) const {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
};

// A func's definition compiled once: its expressions over slots for its arguments, its RVars and the
// parameters; and for a reduction, the monoid's expressions over a second set of slots (the monoid's
// a./b./x./s. variables), kept apart so that they can never collide with the func's own names.
struct FuncProgram {
  std::string name;
  std::vector<Type> output_types;
  std::vector<int> arg_slots;
  Slots frame;  // parameters filled in; a copy is the frame of one evaluation
  std::vector<CompiledExpr> values;

  struct Fold {
    std::vector<int> rvar_slots;
    std::vector<CompiledExpr> mins, extents, predicates, elements;
    Slots monoid_frame;
    std::vector<int> element_slots, lhs_slots, rhs_slots, final_slots;
    std::vector<Real> identity;
    std::vector<Type> state_types;
    std::vector<CompiledExpr> lift, combine, finalize;
  };
  std::optional<Fold> fold;

  struct Remembered {
    std::vector<Real> values;
    std::vector<char> known;
  };
  std::unordered_map<std::vector<int64_t>, Remembered, PointHash, PointEqual> memo;
};

class FuncEvaluator {
 public:
  FuncEvaluator(const FuncGraph &graph, const Arguments &args, std::map<std::string, Real> params,
                Arithmetic arithmetic)
      : args_(args), params_(std::move(params)), arithmetic_(arithmetic), rounding_(arithmetic) {
    for (const Func &f : graph.funcs) programs_[f.name()] = compile(f);
  }

  FuncProgram &program(const std::string &name) { return *programs_.at(name); }

  // All values of func p at a point.
  std::vector<Real> values_at(FuncProgram &p, std::span<const int64_t> point) {
    Slots frame = frame_at(p, point);
    if (p.fold) return fold(p, frame);
    std::vector<Real> out;
    for (size_t v = 0; v < p.values.size(); ++v) out.push_back(pure_value(p, static_cast<int>(v), frame));
    return out;
  }

 private:
  static Slots frame_at(const FuncProgram &p, std::span<const int64_t> point) {
    Slots frame = p.frame;
    for (size_t d = 0; d < point.size(); ++d) frame[p.arg_slots[d]] = static_cast<Real>(point[d]);
    return frame;
  }

  Real pure_value(const FuncProgram &p, int value_index, Slots &frame) const {
    return rounding_.round(p.output_types[value_index], p.values[value_index](frame));
  }

  std::unique_ptr<FuncProgram> compile(const Func &f) {
    auto p = std::make_unique<FuncProgram>();
    p->name = f.name();
    p->output_types = f.output_types();
    const Definition &d = f.definition();
    ExprCompiler compiler(arithmetic_);
    for (const Var &v : d.args) {
      if (params_.count(v.name()))
        fail("func '{}' has an argument named '{}', which is also the name of a scalar parameter; rename one",
             f.name(), v.name());
      p->arg_slots.push_back(compiler.slot(v.name()));
    }
    resolve_calls(compiler, f.name());
    std::vector<std::pair<int, Real>> param_slots;
    for (const auto &[name, value] : params_) param_slots.emplace_back(compiler.slot(name), value);
    if (!d.reduction) {
      for (const Expr &e : d.values) p->values.push_back(compiler.compile(e));
    } else {
      p->fold = compile_fold(compiler, f, *d.reduction);
    }
    p->frame.assign(compiler.num_slots(), 0);
    for (const auto &[k, value] : param_slots) p->frame[k] = value;
    return p;
  }

  FuncProgram::Fold compile_fold(ExprCompiler &compiler, const Func &f, const Reduction &r) {
    FuncProgram::Fold fold;
    for (int k = 0; k < r.domain.dimensions(); ++k) {
      const RVar v = r.domain[k];
      fold.rvar_slots.push_back(compiler.slot(v.name()));
      fold.mins.push_back(compiler.compile(v.min()));
      fold.extents.push_back(compiler.compile(v.extent()));
    }
    for (const Expr &e : r.domain.predicates()) fold.predicates.push_back(compiler.compile(e));
    for (const Expr &e : r.elements) fold.elements.push_back(compiler.compile(e));

    const Monoid &m = *r.monoid;
    ExprCompiler monoid(arithmetic_);
    auto slots_of = [&](const State &s) {
      std::vector<int> slots;
      for (const Expr &v : s.vars()) slots.push_back(monoid.slot(v.as<Variable>()->name));
      return slots;
    };
    fold.element_slots = slots_of(m.element());
    fold.lhs_slots = slots_of(m.lhs());
    fold.rhs_slots = slots_of(m.rhs());
    fold.final_slots = slots_of(m.one());
    std::vector<std::pair<int, Real>> param_slots;
    for (const auto &[name, value] : params_) param_slots.emplace_back(monoid.slot(name), value);
    for (const Expr &e : m.lift) fold.lift.push_back(monoid.compile(e));
    for (const Expr &e : m.combine) fold.combine.push_back(monoid.compile(e));
    for (const Expr &e : m.finalize) fold.finalize.push_back(monoid.compile(e));
    std::vector<CompiledExpr> identity;
    for (const Expr &e : m.identity) identity.push_back(monoid.compile(e));
    fold.monoid_frame.assign(monoid.num_slots(), 0);
    for (const auto &[k, value] : param_slots) fold.monoid_frame[k] = value;
    for (size_t k = 0; k < m.state.size(); ++k) {
      fold.state_types.push_back(m.state[k].type);
      fold.identity.push_back(rounding_.round(m.state[k].type, identity[k](fold.monoid_frame)));
    }
    TWIST_CHECK(fold.finalize.size() == f.output_types().size(),
                "func '{}': {} finalize values for {} outputs", f.name(), fold.finalize.size(),
                f.output_types().size());
    return fold;
  }

  std::vector<Real> fold(FuncProgram &p, Slots &frame) {
    FuncProgram::Fold &fold = *p.fold;
    const size_t dims = fold.rvar_slots.size(), components = fold.identity.size();
    std::vector<int64_t> lo(dims), extent(dims), offset(dims, 0);
    bool empty = false;
    for (size_t d = 0; d < dims; ++d) {
      lo[d] = static_cast<int64_t>(fold.mins[d](frame));
      extent[d] = static_cast<int64_t>(fold.extents[d](frame));
      empty = empty || extent[d] <= 0;
    }
    Slots state = fold.monoid_frame;
    for (size_t k = 0; k < components; ++k) state[fold.lhs_slots[k]] = fold.identity[k];
    std::vector<Real> combined(components);
    while (!empty) {
      for (size_t d = 0; d < dims; ++d) frame[fold.rvar_slots[d]] = static_cast<Real>(lo[d] + offset[d]);
      const bool included = std::all_of(fold.predicates.begin(), fold.predicates.end(),
                                        [&](const CompiledExpr &predicate) { return predicate(frame) != 0; });
      if (included) {
        for (size_t e = 0; e < fold.elements.size(); ++e)
          state[fold.element_slots[e]] = fold.elements[e](frame);
        for (size_t k = 0; k < components; ++k) state[fold.rhs_slots[k]] = fold.lift[k](state);
        for (size_t k = 0; k < components; ++k) combined[k] = fold.combine[k](state);
        for (size_t k = 0; k < components; ++k)
          state[fold.lhs_slots[k]] = rounding_.round(fold.state_types[k], combined[k]);
      }
      // The next point: dimension 0 fastest.
      size_t d = 0;
      while (d < dims && ++offset[d] == extent[d]) offset[d++] = 0;
      if (d == dims) break;
    }
    for (size_t k = 0; k < components; ++k) state[fold.final_slots[k]] = state[fold.lhs_slots[k]];
    std::vector<Real> out;
    for (size_t v = 0; v < fold.finalize.size(); ++v)
      out.push_back(rounding_.round(p.output_types[v], fold.finalize[v](state)));
    return out;
  }

  // Calls inside func `caller`: producers through their memo, inputs with a bounds check.
  void resolve_calls(ExprCompiler &compiler, const std::string &caller) {
    compiler.on_call([this, caller](const Call *call) -> ExprCompiler::CallFn {
      if (call->call_type == Call::Image) return input_reader(caller, call->name);
      auto it = programs_.find(call->name);
      TWIST_CHECK(it != programs_.end(), "func '{}' calls '{}', which the graph walk did not order before it",
                  caller, call->name);
      FuncProgram *producer = it->second.get();
      const int value_index = call->value_index;
      return [this, producer, value_index](std::span<const Real> args) {
        return remembered_value(*producer, value_index, args);
      };
    });
  }

  ExprCompiler::CallFn input_reader(const std::string &caller, const std::string &name) {
    const HostTensor *tensor = &args_.inputs.at(name);  // present: bind_sizes checked every input
    return [tensor, caller, name](std::span<const Real> args) -> Real {
      std::array<int64_t, ExprCompiler::kMaxCallArguments> index;
      const auto point = std::span(index.data(), args.size());
      for (size_t d = 0; d < args.size(); ++d) point[d] = static_cast<int64_t>(args[d]);
      for (size_t d = 0; d < args.size(); ++d)
        if (point[d] < 0 || point[d] >= tensor->shape()[d])
          fail("func '{}' reads input '{}' at index {}, outside its shape {} (dimension {})", caller, name,
               shape_string(point), shape_string(tensor->shape()), d);
      return tensor->get(point);
    };
  }

  // A producer's value, evaluated the first time it is asked for at a point. A reduction's values all come
  // from one fold, so they are remembered together; a pure func's values are separate expressions and each
  // is evaluated only when asked for.
  Real remembered_value(FuncProgram &p, int value_index, std::span<const Real> args) {
    std::array<int64_t, ExprCompiler::kMaxCallArguments> index;
    const auto point = std::span(index.data(), args.size());
    for (size_t d = 0; d < args.size(); ++d) point[d] = static_cast<int64_t>(args[d]);
    auto it = p.memo.find(point);
    if (it == p.memo.end()) {
      const size_t n = p.output_types.size();
      it = p.memo
               .emplace(std::vector<int64_t>(point.begin(), point.end()),
                        FuncProgram::Remembered{std::vector<Real>(n), std::vector<char>(n, 0)})
               .first;
    }
    // Elements of an unordered_map stay where they are when it grows; and evaluating p fills in the memos
    // of its producers only, never its own.
    FuncProgram::Remembered &remembered = it->second;
    if (!remembered.known[value_index]) {
      if (p.fold) {
        remembered.values = values_at(p, point);
        remembered.known.assign(remembered.values.size(), 1);
      } else {
        Slots frame = frame_at(p, point);
        remembered.values[value_index] = pure_value(p, value_index, frame);
        remembered.known[value_index] = 1;
      }
    }
    return remembered.values[value_index];
  }

  const Arguments &args_;
  std::map<std::string, Real> params_;
  Arithmetic arithmetic_;
  ExprCompiler rounding_;  // for ExprCompiler::round under this arithmetic
  std::map<std::string, std::unique_ptr<FuncProgram>> programs_;
};

std::map<std::string, Real> parameter_values(const FuncGraph &graph, const Arguments &args,
                                             const std::map<std::string, int64_t> &sizes,
                                             Arithmetic arithmetic) {
  const ExprCompiler rounding(arithmetic);
  std::map<std::string, Real> values;
  for (const ParamInfo &p : graph.params) {
    if (auto size = sizes.find(p.name); size != sizes.end()) {
      values[p.name] = static_cast<Real>(size->second);
      continue;
    }
    auto scalar = args.scalars.find(p.name);
    if (scalar == args.scalars.end()) {
      const bool size_like = p.type == i32;
      fail("missing scalar '{}' ({}): the program uses it; pass it in Arguments::scalars{}", p.name,
           type_name(p.type), size_like ? " (or give an input whose shape binds it)" : "");
    }
    values[p.name] = rounding.round(p.type, scalar->second);
  }
  return values;
}

}  // namespace

std::vector<HostTensor> evaluate(const Func &output, const Arguments &args, Arithmetic arithmetic) {
  const FuncGraph graph = walk({output});
  const std::map<std::string, Real> params =
      parameter_values(graph, args, bind_sizes(graph, args), arithmetic);
  if (output.dimensions() > 0 && output.shape().empty())
    fail(
        "func '{}' has no shape to be evaluated over; give it one with {}.set_shape({{...}}) (one extent per "
        "dimension)",
        output.name(), output.name());
  std::vector<int64_t> extents;
  for (size_t d = 0; d < output.shape().size(); ++d) {
    const std::string what = fmt::format("the extent of dimension {} of func '{}'", d, output.name());
    const Real extent = parameter_expr_value(output.shape()[d], params, what);
    if (extent < 0)
      fail("{} is `{}` = {}, which is negative", what, show(output.shape()[d]), static_cast<double>(extent));
    extents.push_back(static_cast<int64_t>(extent));
  }

  FuncEvaluator evaluator(graph, args, params, arithmetic);
  FuncProgram &program = evaluator.program(output.name());
  std::vector<HostTensor> results;
  for (const Type &t : output.output_types())
    results.emplace_back(arithmetic == Arithmetic::typed ? t : f64, extents);
  std::vector<int64_t> point(extents.size(), 0);
  for (int64_t linear = 0; linear < results[0].size(); ++linear) {
    const std::vector<Real> values = evaluator.values_at(program, point);
    for (size_t v = 0; v < values.size(); ++v) results[v].set_linear(linear, static_cast<double>(values[v]));
    for (size_t d = extents.size(); d-- > 0;) {  // row-major: the last dimension fastest
      if (++point[d] < extents[d]) break;
      point[d] = 0;
    }
  }
  return results;
}

}  // namespace twist::reference
