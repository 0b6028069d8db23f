#include "scheduler/expr_lowering.h"

#include "lang/error.h"
#include "lang/param.h"
#include "scheduler/loop_nest.h"

namespace twist {

std::optional<int64_t> constant_value(const Halide::Expr &e) {
  const Halide::Expr folded = Halide::Internal::simplify(e);
  if (const int64_t *v = Halide::Internal::as_const_int(folded)) return *v;
  return std::nullopt;
}

using namespace Halide::Internal;

Halide::Expr flat_index(const std::vector<Halide::Expr> &coords, const std::vector<Halide::Expr> &shape) {
  TWIST_CHECK(coords.size() == shape.size(), "flat_index of {} coordinates in a rank-{} tensor",
              coords.size(), shape.size());
  Halide::Expr index = coords[0];
  for (size_t d = 1; d < coords.size(); ++d) index = index * shape[d] + coords[d];
  return index;
}

Halide::Expr load(const Type &t, const std::string &name, const Halide::Expr &index) {
  return Load::make(t, name, index, Halide::Buffer<>(), Parameter(), const_true(), ModulusRemainder());
}

void ExprLowering::bind(const std::map<std::string, Halide::Expr> &values) {
  for (const auto &[var, value] : values) values_[var] = value;
}

class LoweringMutator : public IRMutator {
 public:
  explicit LoweringMutator(const ExprLowering &l) : l_(l) {}
  using IRMutator::visit;

  Halide::Expr visit(const Variable *v) override {
    if (is_param(v)) return v;
    auto it = l_.values_.find(v->name);
    return it == l_.values_.end() ? Halide::Expr(v) : it->second;
  }

  Halide::Expr visit(const Call *c) override {
    if (c->call_type != Call::Image && c->call_type != Call::Halide) return IRMutator::visit(c);
    std::vector<Halide::Expr> args;
    for (const Halide::Expr &a : c->args) args.push_back(mutate(a));
    if (c->call_type == Call::Image) {
      if (auto it = l_.readers_.find(c->name); it != l_.readers_.end()) return it->second(args);
      return global_read(c->name, args);
    }
    if (auto it = l_.func_readers_.find(c->name); it != l_.func_readers_.end()) {
      TWIST_CHECK(c->value_index == 0, "func '{}' is read from its buffer, which holds one value", c->name);
      return it->second(args);
    }
    const Func &f = l_.graph_.func(c->name);
    const Definition &d = f.definition();
    if (!d.is_reduction()) {
      // Inline the pure func: its value with its arguments bound to the call's.
      std::map<std::string, Halide::Expr> bound;
      for (size_t k = 0; k < d.args.size(); ++k) bound[d.args[k].name()] = args[k];
      return mutate_inlined(substitute(bound, d.values[c->value_index]));
    }
    if (l_.func_hook_)
      if (auto e = l_.func_hook_(c, args)) return *e;
    fail(
        "func '{}' is a reduction called from another func's expression at ({}), which this schedule cannot "
        "fuse: "
        "compute it at the consumer's loop, or make it the program's output",
        c->name, fmt::format("{}", fmt::join(args, ", ")));
  }

 private:
  // An inlined func's variables are already bound: mutate only its calls, not its (substituted) variables.
  Halide::Expr mutate_inlined(const Halide::Expr &e) {
    LoweringMutator inner(l_);
    inner.skip_variables_ = true;
    return inner.mutate(e);
  }

  Halide::Expr global_read(const std::string &name, const std::vector<Halide::Expr> &coords) {
    const Input *input = nullptr;
    for (const Input &in : l_.graph_.inputs)
      if (in.name() == name) input = &in;
    TWIST_CHECK(input, "input '{}' is not in the program", name);
    return clamped_input_load(*input, coords);
  }

  const ExprLowering &l_;
  bool skip_variables_ = false;

 public:
  Halide::Expr mutate(const Halide::Expr &e) override {
    if (skip_variables_ && e.as<Variable>()) return e;
    return IRMutator::mutate(e);
  }
};

std::vector<Halide::Expr> clamped_coords(const std::vector<Halide::Expr> &coords,
                                         const std::vector<Halide::Expr> &shape) {
  std::vector<Halide::Expr> clamped;
  for (size_t d = 0; d < coords.size(); ++d) clamped.push_back(Halide::clamp(coords[d], 0, shape[d] - 1));
  return clamped;
}

Halide::Expr clamped_input_load(const Input &input, const std::vector<Halide::Expr> &coords) {
  const std::vector<Halide::Expr> shape = to_halide(input.shape());
  return load(input.type(), input.name(), flat_index(clamped_coords(coords, shape), shape));
}

void read_intermediates(ExprLowering &lowering, const std::vector<BufferArg> &intermediates) {
  for (const BufferArg &b : intermediates)
    lowering.read_func_with(b.name, [b](const std::vector<Halide::Expr> &coords) {
      return load(b.type, b.name, flat_index(clamped_coords(coords, b.shape), b.shape));
    });
}

Halide::Expr ExprLowering::lower(const Halide::Expr &e) const {
  LoweringMutator m(*this);
  return m.mutate(e);
}

}  // namespace twist
