#include "scheduler/default_schedule.h"

#include "scheduler/contraction.h"

namespace twist {

namespace {

// Whether `coords` are exactly (first, second), two variables by name.
bool indexed_by(const std::vector<Halide::Expr> &coords, const std::string &first,
                const std::string &second) {
  if (coords.size() != 2) return false;
  const auto *a = coords[0].as<Halide::Internal::Variable>(), *b = coords[1].as<Halide::Internal::Variable>();
  return a && b && a->name == first && b->name == second;
}

bool is_tensor_core_contraction(const Func &f) {
  const Definition &d = f.definition();
  if (!d.is_reduction() || d.args.size() != 2 || d.reduction->domain.dimensions() != 1 ||
      !d.reduction->domain.predicates().empty())
    return false;
  const Monoid &m = *d.reduction->monoid;
  const std::optional<Contraction> c = as_contraction(m, d.reduction->elements);
  if (!c || m.state[0].type != f32 || c->a.type != c->b.type || c->a.input == c->b.input) return false;
  const std::string i = d.args[0].name(), j = d.args[1].name(), k = d.reduction->domain[0].name();
  return (indexed_by(c->a.coords, i, k) && indexed_by(c->b.coords, k, j)) ||
         (indexed_by(c->b.coords, i, k) && indexed_by(c->a.coords, k, j));
}

}  // namespace

Schedule with_default_schedules(const FuncGraph &graph, const Schedule &schedule) {
  Schedule completed = schedule;
  const Func &output = graph.funcs.back();
  if (schedule.find(output.name()) || !is_tensor_core_contraction(output)) return completed;
  const Definition &d = output.definition();
  const std::string i = d.args[0].name(), j = d.args[1].name(), k = d.reduction->domain[0].name();
  const Contraction c = *as_contraction(*d.reduction->monoid, d.reduction->elements);
  FuncSchedule &s = tile_for_mma(completed[output], i, j, k, 128, 128, 32, 64, 64);
  for (const std::string &operand : {c.a.input, c.b.input})
    for (const Input &in : graph.inputs)
      if (in.name() == operand) s.stage(in, "ko", Transport::cp_async, 3);
  return completed;
}

}  // namespace twist
