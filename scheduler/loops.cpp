#include "scheduler/loops.h"

#include <algorithm>

#include "lang/error.h"
#include "scheduler/expr_lowering.h"

namespace twist {

using namespace Halide::Internal;

Halide::Expr LoopDim::var() const {
  return Variable::make(Halide::Int(32), name);
}

int LoopDim::constant_extent(const std::string &func, const char *why) const {
  const std::optional<int64_t> c = constant_value(extent);
  if (!c)
    fail("schedule of '{}': loop '{}' has extent {}, but {} needs a constant extent", func, name, extent,
         why);
  return static_cast<int>(*c);
}

const LoopDim &LoopStructure::dim(const std::string &name) const {
  int i = index(name);
  if (i < 0) fail("schedule of '{}': '{}' is not one of its loops (they are {})", func, name, names());
  return dims[i];
}

int LoopStructure::index(const std::string &name) const {
  for (size_t i = 0; i < dims.size(); ++i)
    if (dims[i].name == name) return static_cast<int>(i);
  return -1;
}

std::string LoopStructure::names() const {
  std::string s;
  for (const LoopDim &d : dims) s += (s.empty() ? "" : ", ") + d.name;
  return s;
}

namespace {

void substitute_all(LoopStructure &loops, const std::string &var, const Halide::Expr &replacement,
                    const Halide::Expr &unclamped) {
  for (auto &[name, value] : loops.value_of) value = substitute(var, replacement, value);
  for (auto &[name, value] : loops.unclamped_value_of) value = substitute(var, unclamped, value);
  for (Halide::Expr &g : loops.repeat_guards) g = substitute(var, unclamped, g);
}

void substitute_all(LoopStructure &loops, const std::string &var, const Halide::Expr &replacement) {
  substitute_all(loops, var, replacement, replacement);
}

void apply_split(LoopStructure &loops, const SplitDirective &s) {
  const int at = loops.index(s.var);
  if (at < 0) loops.dim(s.var);  // throws with the list of loops
  for (const std::string &n : {s.outer, s.inner})
    if (loops.index(n) >= 0 && n != s.var)
      fail("schedule of '{}': split({}) would create a second loop named '{}'", loops.func, s.var, n);
  LoopDim old = loops.dims[at];
  LoopDim outer{s.outer, simplify((old.extent + (s.factor - 1)) / s.factor), old.reduction, Binding::serial};
  LoopDim inner{s.inner, Halide::Expr(s.factor), old.reduction, Binding::serial};
  loops.dims[at] = outer;
  loops.dims.insert(loops.dims.begin() + at + 1, inner);
  // A split wider than a loop of known extent (16 rows of an atom over 4 heads) repeats its last point
  // instead of running past it, so every read stays inside the footprint the loop really has.
  Halide::Expr inner_value = inner.var();
  if (const std::optional<int64_t> e = constant_value(old.extent); e && *e < s.factor) {
    inner_value = Halide::min(inner.var(), static_cast<int>(*e - 1));
    if (!old.reduction) loops.repeat_guards.push_back(inner.var() < static_cast<int>(*e));
  }
  substitute_all(loops, old.name, outer.var() * s.factor + inner_value, outer.var() * s.factor + inner.var());
}

void apply_fuse(LoopStructure &loops, const FuseDirective &f) {
  const int inner_at = loops.index(f.inner), outer_at = loops.index(f.outer);
  if (inner_at < 0) loops.dim(f.inner);
  if (outer_at < 0) loops.dim(f.outer);
  if (outer_at + 1 != inner_at)
    fail("schedule of '{}': fuse({}, {}) needs '{}' to be the loop just outside '{}' (the loops are {})",
         loops.func, f.inner, f.outer, f.outer, f.inner, loops.names());
  LoopDim inner = loops.dims[inner_at], outer = loops.dims[outer_at];
  if (inner.reduction != outer.reduction)
    fail("schedule of '{}': fuse({}, {}) mixes a reduction loop with a pure one", loops.func, f.inner,
         f.outer);
  LoopDim fused{f.fused, simplify(inner.extent * outer.extent), inner.reduction, Binding::serial};
  loops.dims[outer_at] = fused;
  loops.dims.erase(loops.dims.begin() + inner_at);
  substitute_all(loops, inner.name, fused.var() % inner.extent);
  substitute_all(loops, outer.name, fused.var() / inner.extent);
}

void apply_reorder(LoopStructure &loops, const ReorderDirective &r) {
  std::vector<int> positions;
  for (const std::string &n : r.innermost_first) {
    int at = loops.index(n);
    if (at < 0) loops.dim(n);
    if (std::find(positions.begin(), positions.end(), at) != positions.end())
      fail("schedule of '{}': reorder() names '{}' twice", loops.func, n);
    positions.push_back(at);
  }
  std::vector<int> slots = positions;
  std::sort(slots.begin(), slots.end());  // outermost slot first
  std::vector<LoopDim> moved;
  for (int p : positions) moved.push_back(loops.dims[p]);
  // The first name listed takes the innermost slot.
  for (size_t k = 0; k < moved.size(); ++k) loops.dims[slots[slots.size() - 1 - k]] = moved[k];
}

}  // namespace

LoopStructure make_loops(const Func &f, const std::vector<Halide::Expr> &extents,
                         const FuncSchedule *schedule) {
  const Definition &d = f.definition();
  LoopStructure loops;
  loops.func = f.name();
  if (extents.size() != d.args.size())
    fail("func '{}' has {} dimension(s) but {} extent(s) were given", f.name(), d.args.size(),
         extents.size());
  for (size_t k = 0; k < d.args.size(); ++k) {
    LoopDim dim{d.args[k].name(), extents[k], false, Binding::serial};
    loops.value_of[dim.name] = dim.var();
    loops.unclamped_value_of[dim.name] = dim.var();
    loops.pure_guards.push_back(dim.var() < extents[k]);
    loops.dims.push_back(dim);
  }
  if (d.reduction) {
    const RDom &r = d.reduction->domain;
    for (int k = r.dimensions() - 1; k >= 0; --k) {
      RVar v = r[k];
      LoopDim dim{v.name(), v.extent(), true, Binding::serial};
      loops.value_of[dim.name] = simplify(v.min() + dim.var());
      loops.unclamped_value_of[dim.name] = loops.value_of[dim.name];
      loops.reduction_guards.push_back(dim.var() < v.extent());
      loops.dims.push_back(dim);
    }
  }
  // The guards are written over the original loops; they are rewritten in terms of the final loops below.
  if (schedule) {
    for (const FuncSchedule::Transform &t : schedule->transforms()) {
      if (t.split) apply_split(loops, *t.split);
      if (t.fuse) apply_fuse(loops, *t.fuse);
      if (t.reorder) apply_reorder(loops, *t.reorder);
    }
    for (const auto &[name, binding] : schedule->bindings()) {
      int at = loops.index(name);
      if (at < 0) loops.dim(name);
      loops.dims[at].binding = binding;
    }
  }
  // Guards in terms of the final loops: each original loop variable is (value_of - min) of its variable.
  std::map<std::string, Halide::Expr> original_in_loops;
  for (size_t k = 0; k < d.args.size(); ++k)
    original_in_loops[d.args[k].name()] = loops.unclamped_value_of[d.args[k].name()];
  if (d.reduction) {
    const RDom &r = d.reduction->domain;
    for (int k = 0; k < r.dimensions(); ++k)
      original_in_loops[r[k].name()] = simplify(loops.unclamped_value_of[r[k].name()] - r[k].min());
  }
  for (auto *guards : {&loops.pure_guards, &loops.reduction_guards})
    for (Halide::Expr &g : *guards) g = simplify(substitute(original_in_loops, g));
  for (Halide::Expr &g : loops.repeat_guards) g = simplify(g);
  loops.pure_guards.insert(loops.pure_guards.end(), loops.repeat_guards.begin(), loops.repeat_guards.end());
  if (d.reduction)
    for (const Expr &p : d.reduction->domain.predicates())
      loops.reduction_guards.push_back(in_loop_terms(loops, p));
  return loops;
}

Halide::Expr in_loop_terms(const LoopStructure &loops, const Halide::Expr &e) {
  return substitute(loops.value_of, e);
}

}  // namespace twist

namespace twist {

void split_into_parts(LoopStructure &loops, const std::string &name, const std::string &part_name, int parts,
                      Binding binding) {
  const int at = loops.index(name);
  if (at < 0) loops.dim(name);
  if (!loops.dims[at].reduction)
    fail("schedule of '{}': split_reduction({}) names a pure loop; name a reduction loop", loops.func, name);
  LoopDim &dim = loops.dims[at];
  const Halide::Expr chunk = simplify((dim.extent + (parts - 1)) / parts);
  LoopDim part{part_name, Halide::Expr(parts), true, binding};
  const Halide::Expr value = part.var() * chunk + dim.var();
  const Halide::Expr old_extent = dim.extent;
  dim.extent = chunk;
  for (auto *values : {&loops.value_of, &loops.unclamped_value_of})
    for (auto &[var, v] : *values) v = simplify(substitute(name, value, v));
  for (auto &g : loops.reduction_guards) g = simplify(substitute(name, value, g));
  // The last part may run past the end of the loop it was cut from.
  loops.reduction_guards.push_back(value < old_extent);
  loops.dims.insert(loops.dims.begin() + at, part);
}

}  // namespace twist
