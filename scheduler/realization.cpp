#include "scheduler/realization.h"

#include <functional>
#include <map>
#include <optional>
#include <set>

#include "lang/error.h"
#include "scheduler/cooperative_tree.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/loops.h"

namespace twist {

using namespace Halide::Internal;

const char *to_string(Placement p) {
  switch (p) {
    case Placement::inlined:
      return "inlined";
    case Placement::at_consumer:
      return "computed at";
    case Placement::epilogue:
      return "computed by its own schedule, its consumer fused as the epilogue:";
    case Placement::root:
      return "compute_root";
    case Placement::output:
      return "output";
  }
  return "?";
}

const FuncRealization &Realization::of(const std::string &func) const {
  for (const FuncRealization &r : funcs)
    if (r.func.name() == func) return r;
  fail("func '{}' is not part of this program", func);
}

std::vector<const FuncRealization *> Realization::computed_at(const std::string &consumer) const {
  std::vector<const FuncRealization *> at;
  for (const FuncRealization &r : funcs)
    if (r.placement == Placement::at_consumer && r.consumer == consumer) at.push_back(&r);
  return at;
}

std::string Realization::to_string() const {
  std::string s;
  for (const FuncRealization &r : funcs) {
    s += fmt::format("{}: {}", r.func.name(), twist::to_string(r.placement));
    if (r.placement == Placement::at_consumer)
      s += fmt::format(" {} loop {}", r.consumer, r.loop.empty() ? "(its row)" : r.loop);
    if (r.placement == Placement::epilogue) s += " " + r.consumer;
    if (r.paired_dim >= 0) s += fmt::format(" (column pairs in dimension {})", r.paired_dim);
    if (r.fold_dim >= 0) s += fmt::format(" (rows folded in dimension {})", r.fold_dim);
    if (!r.extents.empty()) s += fmt::format(" over [{}]", fmt::join(r.extents, ", "));
    if (r.by_default) s += " (default)";
    s += "\n";
  }
  return s;
}

std::vector<std::string> loop_names(const Func &f, const FuncSchedule *schedule) {
  // The names do not depend on the extents.
  const std::vector<Halide::Expr> extents(f.definition().args.size(), Halide::Expr(1));
  std::vector<std::string> names;
  for (const LoopDim &d : make_loops(f, extents, schedule).dims) names.push_back(d.name);
  return names;
}

Halide::Expr inline_calls(const FuncGraph &graph, const Realization &realization, const Halide::Expr &e) {
  struct Inliner : IRMutator {
    const FuncGraph &graph;
    const Realization &realization;
    Inliner(const FuncGraph &g, const Realization &r) : graph(g), realization(r) {}
    using IRMutator::visit;
    Halide::Expr visit(const Call *c) override {
      Halide::Expr mutated = IRMutator::visit(c);
      if (c->call_type != Call::Halide || realization.of(c->name).placement != Placement::inlined)
        return mutated;
      const Call *call = mutated.as<Call>();
      const Definition &d = graph.func(c->name).definition();
      std::map<std::string, Halide::Expr> bound;
      for (size_t k = 0; k < d.args.size(); ++k) bound[d.args[k].name()] = call->args[k];
      return mutate(substitute(bound, d.values[c->value_index]));
    }
  } inliner(graph, realization);
  return inliner.mutate(e);
}

namespace {

// The calls of funcs (not inputs) in `e`, each with its arguments.
std::vector<const Call *> func_calls(const Halide::Expr &e) {
  struct Calls : IRVisitor {
    std::vector<const Call *> calls;
    using IRVisitor::visit;
    void visit(const Call *c) override {
      IRVisitor::visit(c);
      if (c->call_type == Call::Halide) calls.push_back(c);
    }
  } calls;
  e.accept(&calls);
  return calls.calls;
}

class Planner {
 public:
  Planner(const FuncGraph &g, const Schedule &s) : graph_(g), schedule_(s) {}

  Realization plan() {
    const Func &output = graph_.funcs.back();
    for (const Func &f : graph_.funcs) {
      FuncRealization r;
      r.func = f;
      const FuncSchedule *fs = schedule_.find(f.name());
      if (f.same_as(output)) {
        r.placement = Placement::output;
      } else if (fs && fs->computed_root()) {
        if (f.outputs() != 1)
          fail(
              "schedule of '{}': compute_root() of a func of {} values is not supported (its buffer holds "
              "one "
              "value); compute each value as a func of its own",
              f.name(), f.outputs());
        r.placement = Placement::root;
      } else if (fs && fs->compute_at()) {
        r.placement = Placement::at_consumer;
        r.consumer = fs->compute_at()->consumer;
        r.loop = fs->compute_at()->at;
      } else {
        r.by_default = true;
        r.placement = f.definition().is_reduction() ? Placement::root : Placement::inlined;
      }
      realization_.funcs.push_back(r);
    }
    place_default_reductions();
    check_compute_at();
    infer_extents();
    return realization_;
  }

 private:
  // Every expression a func computes, its inlined producers substituted.
  std::vector<Halide::Expr> computed_expressions(const Func &f) const {
    std::vector<Halide::Expr> out;
    for (const Expr &e : expressions(f.definition())) out.push_back(inline_calls(graph_, realization_, e));
    return out;
  }

  // The funcs (not inlined) whose computation calls `name`.
  std::vector<std::string> callers(const std::string &name) const {
    std::vector<std::string> out;
    for (const FuncRealization &r : realization_.funcs) {
      if (r.placement == Placement::inlined) continue;
      for (const Halide::Expr &e : computed_expressions(r.func))
        for (const Call *c : func_calls(e))
          if (c->name == name && std::find(out.begin(), out.end(), r.func.name()) == out.end())
            out.push_back(r.func.name());
    }
    return out;
  }

  void place_default_reductions() {
    const Func &output = graph_.funcs.back();
    // Consumers first, so that a reduction's callers are placed before it.
    for (auto it = realization_.funcs.rbegin(); it != realization_.funcs.rend(); ++it) {
      FuncRealization &r = *it;
      if (!r.by_default || !r.func.definition().is_reduction()) continue;
      // Where each caller is computed: its own stage, or the stage it is computed at.
      std::set<std::string> homes;
      for (const std::string &c : callers(r.func.name())) {
        const FuncRealization &caller = realization_.of(c);
        homes.insert(caller.placement == Placement::at_consumer ? caller.consumer : c);
      }
      if (homes.size() != 1) continue;  // a stage of its own
      const Func &consumer = graph_.func(*homes.begin());
      if (consumer.definition().is_reduction() ||
          realization_.of(consumer.name()).placement == Placement::at_consumer)
        continue;
      const FuncSchedule *fs = schedule_.find(r.func.name());
      const bool pointwise = reads_pointwise(consumer, r.func);
      const int paired = column_pairs_from_registers(consumer, r.func, fs);
      const int folded = row_folds_from_registers(consumer, r.func, fs);
      if (consumer.same_as(output) && (pointwise || paired >= 0 || folded >= 0) && fs &&
          !binds_reduction_to_threads(r.func, fs)) {
        r.placement = Placement::epilogue;
        r.consumer = consumer.name();
        r.paired_dim = pointwise || folded >= 0 ? -1 : paired;
        r.fold_dim = folded;  // read pointwise or rotated, beside its folds
      } else {
        r.placement = Placement::at_consumer;
        r.consumer = consumer.name();
      }
    }
  }

  // Whether every call of `producer` in `consumer` is at the consumer's own point.
  bool reads_pointwise(const Func &consumer, const Func &producer) const {
    const Definition &cd = consumer.definition();
    for (const Halide::Expr &e : computed_expressions(consumer))
      for (const Call *c : func_calls(e)) {
        if (c->name != producer.name()) continue;
        if (c->args.size() != cd.args.size()) return false;
        for (size_t k = 0; k < c->args.size(); ++k)
          if (!equal(simplify(c->args[k]), Halide::Expr(cd.args[k]))) return false;
      }
    return true;
  }

  // The dimension d in which every call of `producer` in `consumer` is at (.., 2 x_d + c, ..), c in {0, 1},
  // and at the consumer's own point x in every other dimension; none where the calls are otherwise.
  std::optional<int> reads_column_pairs(const Func &consumer, const Func &producer) const {
    const Definition &cd = consumer.definition();
    int paired = -1;
    for (const Halide::Expr &e : computed_expressions(consumer))
      for (const Call *c : func_calls(e)) {
        if (c->name != producer.name()) continue;
        if (c->args.size() != cd.args.size()) return std::nullopt;
        for (size_t k = 0; k < c->args.size(); ++k) {
          const Halide::Expr x(cd.args[k]);
          if (equal(simplify(c->args[k]), x)) continue;
          const std::optional<int64_t> offset = constant_value(c->args[k] - 2 * x);
          if (!offset || (*offset != 0 && *offset != 1) || (paired >= 0 && paired != static_cast<int>(k)))
            return std::nullopt;
          paired = static_cast<int>(k);
        }
      }
    if (paired < 0) return std::nullopt;
    return paired;
  }

  // `dim` where it is a dimension of the reduction `producer` along which its matrix atom (under `fs`) lays
  // out its columns, or -1: a consumer reading the producer there is computed from the accumulators'
  // registers.
  static int along_atom_columns(const Func &producer, std::optional<int> dim, const FuncSchedule *fs) {
    if (!dim || !fs || !fs->atom()) return -1;
    // The coordinates do not depend on the extents.
    const std::vector<Halide::Expr> extents(producer.definition().args.size(), Halide::Expr(1));
    const LoopStructure loops = make_loops(producer, extents, fs);
    return expr_uses_var(loops.value_of.at(producer.definition().args[*dim].name()), fs->atom()->j) ? *dim
                                                                                                    : -1;
  }

  // The dimension in which `consumer` reads the reduction `producer` at column pairs (reads_column_pairs)
  // where the producer's matrix atom has its columns along it, or -1. The atoms' accumulator layouts keep
  // columns 2x and 2x + 1 in one thread (the kernel checks that from the layouts), so such a consumer is
  // computed from registers.
  int column_pairs_from_registers(const Func &consumer, const Func &producer, const FuncSchedule *fs) const {
    return along_atom_columns(producer, reads_column_pairs(consumer, producer), fs);
  }

  // Whether `arg`, a coordinate at which `consumer` reads a func, is (x + c) % E for the consumer's variable
  // x and constants c and E: a rotation along x.
  static bool is_rotation(const Halide::Expr &arg, const Var &x) {
    const Halide::Expr simplified = simplify(arg);
    const Mod *mod = simplified.as<Mod>();
    if (!mod || !as_const_int(mod->b)) return false;
    const Halide::Expr offset = simplify(mod->a - Halide::Expr(x));
    return as_const_int(offset) != nullptr;
  }

  // The dimension d in which `consumer` reads `producer` at its own point or rotated ((x_d + c) % E), and at
  // its own point in every other dimension, where it also reads at least one row fold of the producer: a
  // reduction computed at the consumer, read at the consumer's point without dimension d, whose elements
  // read the producer at that point with its reduction variable (over the whole of dimension d) in
  // dimension d; every reduction the consumer reads is the producer or such a fold. None otherwise.
  std::optional<int> reads_row_folds(const Func &consumer, const Func &producer) const {
    const Definition &cd = consumer.definition();
    const size_t rank = cd.args.size();
    int folded = -1;
    bool folds = false;
    auto same_dim = [&](int k) {
      if (folded >= 0 && folded != k) return false;
      folded = k;
      return true;
    };
    for (const Halide::Expr &e : computed_expressions(consumer))
      for (const Call *c : func_calls(e)) {
        if (!graph_.has_func(c->name)) continue;
        const Func &callee = graph_.func(c->name);
        if (c->name == producer.name()) {
          if (c->args.size() != rank) return std::nullopt;
          for (size_t k = 0; k < rank; ++k) {
            if (equal(simplify(c->args[k]), Halide::Expr(cd.args[k]))) continue;
            if (!is_rotation(c->args[k], cd.args[k]) || !same_dim(static_cast<int>(k))) return std::nullopt;
          }
          continue;
        }
        if (!callee.definition().is_reduction()) continue;
        const FuncRealization &fold = realization_.of(c->name);
        if (fold.placement != Placement::at_consumer || fold.consumer != consumer.name() ||
            c->args.size() + 1 != rank)
          return std::nullopt;
        const Definition &fd = callee.definition();
        if (fd.reduction->domain.dimensions() != 1 || !fd.reduction->domain.predicates().empty())
          return std::nullopt;
        // The fold's coordinates are the consumer's without one dimension k.
        std::optional<int> skipped;
        for (size_t k = 0, a = 0; k < rank; ++k) {
          if (a < c->args.size() && equal(simplify(c->args[a]), Halide::Expr(cd.args[k]))) {
            ++a;
            continue;
          }
          if (skipped) return std::nullopt;
          skipped = static_cast<int>(k);
        }
        if (!skipped || !same_dim(*skipped)) return std::nullopt;
        // Its elements read the producer at its own coordinates with its reduction variable in dimension k.
        const Halide::Expr rx(fd.reduction->domain[0]);
        for (const Halide::Expr &fe : computed_expressions(callee))
          for (const Call *p : func_calls(fe)) {
            if (p->name != producer.name()) continue;
            if (p->args.size() != rank) return std::nullopt;
            for (size_t k = 0, a = 0; k < rank; ++k) {
              const Halide::Expr want = static_cast<int>(k) == *skipped ? rx : Halide::Expr(fd.args[a++]);
              if (!equal(simplify(p->args[k]), want)) return std::nullopt;
            }
          }
        folds = true;
      }
    if (!folds || folded < 0) return std::nullopt;
    return folded;
  }

  // The dimension in which `consumer` folds the reduction `producer` in its rows (reads_row_folds) where the
  // producer's matrix atom has its columns along it, or -1. The kernel checks that one thread quad holds
  // each row of those columns whole, and that each fold's domain is the whole dimension
  // (ReductionKernelBuilder::stores_with_row_folds).
  int row_folds_from_registers(const Func &consumer, const Func &producer, const FuncSchedule *fs) const {
    return along_atom_columns(producer, reads_row_folds(consumer, producer), fs);
  }

  void check_compute_at() const {
    for (const FuncRealization &r : realization_.funcs) {
      if (r.placement != Placement::at_consumer || r.by_default) continue;
      const std::string &name = r.func.name();
      if (!graph_.has_func(r.consumer))
        fail("schedule of '{}': compute_at({}, {}) names func '{}', which is not part of this program", name,
             r.consumer, r.loop, r.consumer);
      const std::vector<std::string> by = callers(name);
      if (std::find(by.begin(), by.end(), r.consumer) == by.end())
        fail(
            "schedule of '{}': compute_at({}, {}) places it in '{}', which does not read it (it is read by "
            "{}); "
            "compute it at a loop of a func that reads it",
            name, r.consumer, r.loop, r.consumer,
            by.empty() ? std::string("no computed func") : fmt::format("{}", fmt::join(by, ", ")));
      const Func &consumer = graph_.func(r.consumer);
      const std::vector<std::string> loops = loop_names(consumer, schedule_.find(r.consumer));
      if (std::find(loops.begin(), loops.end(), r.loop) == loops.end())
        fail(
            "schedule of '{}': compute_at({}, {}) names loop '{}', which is not a loop of '{}' (its loops "
            "are "
            "{}); name one of them",
            name, r.consumer, r.loop, r.loop, r.consumer, fmt::join(loops, ", "));
      if (!r.func.definition().is_reduction())
        fail(
            "schedule of '{}': compute_at() of a pure func is not supported; pure funcs are inlined (the "
            "default) or computed as a stage with compute_root()",
            name);
    }
  }

  // The range of each variable of `f` where it is computed: a stage's pure variables over its extents, a
  // func computed inside another over the bounds of the consumer's calls, and RVars over their domains.
  Scope<Interval> variable_ranges(const FuncRealization &r) {
    Scope<Interval> scope;
    const Definition &d = r.func.definition();
    std::vector<Interval> pure(d.args.size());
    if (!r.extents.empty()) {
      for (size_t k = 0; k < d.args.size(); ++k) pure[k] = Interval(0, simplify(r.extents[k] - 1));
    } else {
      const FuncRealization &consumer = realization_.of(r.consumer);
      pure = call_bounds(consumer, r.func.name());
    }
    for (size_t k = 0; k < d.args.size(); ++k) scope.push(d.args[k].name(), pure[k]);
    if (d.reduction)
      for (int k = 0; k < d.reduction->domain.dimensions(); ++k) {
        const RVar v = d.reduction->domain[k];
        scope.push(v.name(), Interval(v.min(), simplify(v.min() + v.extent() - 1)));
      }
    return scope;
  }

  // The bounds of the coordinates at which `caller` reads `callee`, one interval per dimension of the callee.
  std::vector<Interval> call_bounds(const FuncRealization &caller, const std::string &callee) {
    const Scope<Interval> scope = variable_ranges(caller);
    std::vector<Interval> bounds;
    for (const Halide::Expr &e : computed_expressions(caller.func))
      for (const Call *c : func_calls(e)) {
        if (c->name != callee) continue;
        if (bounds.empty()) bounds.resize(c->args.size(), Interval::nothing());
        for (size_t k = 0; k < c->args.size(); ++k) {
          const Interval i = bounds_of_expr_in_scope(c->args[k], scope);
          if (!i.is_bounded())
            fail("func '{}' reads '{}' at coordinate {} = {}, whose bounds cannot be inferred",
                 caller.func.name(), callee, k, c->args[k]);
          bounds[k].include(i);
        }
      }
    for (Interval &i : bounds) i = Interval(simplify(i.min), simplify(i.max));
    return bounds;
  }

  void infer_extents() {
    FuncRealization &out = realization_.funcs.back();
    if (out.func.shape().empty())
      fail("func '{}' is the program's output, so it needs its extents: call {}.set_shape({{...}})",
           out.func.name(), out.func.name());
    out.extents = to_halide(out.func.shape());
    for (auto it = realization_.funcs.rbegin() + 1; it != realization_.funcs.rend(); ++it) {
      FuncRealization &r = *it;
      if (r.placement == Placement::epilogue) {
        r.extents = realization_.of(r.consumer).extents;
        if (r.paired_dim >= 0) r.extents[r.paired_dim] = simplify(2 * r.extents[r.paired_dim]);
      }
      if (r.placement != Placement::root) continue;
      std::vector<Interval> bounds;
      for (const std::string &c : callers(r.func.name())) {
        const std::vector<Interval> b = call_bounds(realization_.of(c), r.func.name());
        if (bounds.empty()) bounds.resize(b.size(), Interval::nothing());
        for (size_t k = 0; k < b.size(); ++k) bounds[k].include(b[k]);
      }
      if (bounds.empty()) fail("func '{}' is computed as a stage but nothing reads it", r.func.name());
      for (size_t k = 0; k < bounds.size(); ++k) {
        if (can_prove(bounds[k].min < 0))
          fail("func '{}' is read at coordinate {} from {}, below 0; a stage's buffer starts at 0",
               r.func.name(), k, bounds[k].min);
        r.extents.push_back(simplify(bounds[k].max + 1));
      }
    }
  }

  const FuncGraph &graph_;
  const Schedule &schedule_;
  Realization realization_;
};

}  // namespace

Realization plan_realization(const FuncGraph &graph, const Schedule &schedule) {
  return Planner(graph, schedule).plan();
}

}  // namespace twist
