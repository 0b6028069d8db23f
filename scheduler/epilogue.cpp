#include "scheduler/epilogue.h"

#include "lang/error.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/intrinsics.h"
#include "scheduler/stmt_building.h"

namespace twist {

using namespace Halide::Internal;
using namespace twist::stmt;

namespace {

// The values the output stores: the monoid's finalize, or the fused consumer's values with its call of the
// reduction replaced by them.
std::vector<Halide::Expr> output_values(const ReductionKernelRequest &r,
                                        const std::vector<Halide::Expr> &coords) {
  const Monoid &m = *r.reduction.definition().reduction->monoid;
  std::vector<Halide::Expr> finalized(m.finalize.begin(), m.finalize.end());
  if (!r.consumer) return finalized;
  const Definition &cd = r.consumer->definition();
  ExprLowering lowering(*r.graph);
  read_intermediates(lowering, r.intermediates);
  for (size_t k = 0; k < cd.args.size(); ++k) lowering.bind(cd.args[k].name(), coords[k]);
  const std::string &reduction = r.reduction.name();
  lowering.on_func_call(
      [&](const Call *c, const std::vector<Halide::Expr> &args) -> std::optional<Halide::Expr> {
        if (c->name != reduction) return std::nullopt;
        for (size_t k = 0; k < args.size(); ++k)
          if (!equal(simplify(args[k]), simplify(coords[k])))
            fail("func '{}' reads '{}' at another point than its own, so it cannot be fused as its epilogue",
                 r.consumer->name(), reduction);
        return finalized[c->value_index];
      });
  std::vector<Halide::Expr> values;
  for (const Expr &v : cd.values) values.push_back(lowering.lower(v));
  return values;
}

}  // namespace

Stmt epilogue_stores(const ReductionKernelRequest &r, const std::vector<Halide::Expr> &coords,
                     const std::vector<Halide::Expr> &state, const Halide::Expr &part) {
  const Monoid &m = *r.reduction.definition().reduction->monoid;
  std::vector<Stmt> stores;
  const State s = m.one();
  if (r.output == ReductionKernelRequest::Output::partial_states) {
    std::vector<Halide::Expr> at = {part}, shape = {r.output_buffers[0].shape[0]};
    at.insert(at.end(), coords.begin(), coords.end());
    shape.insert(shape.end(), r.extents.begin(), r.extents.end());
    for (int c = 0; c < s.size(); ++c)
      stores.push_back(store(r.output_buffers[c].name, s[c], flat_index(at, shape)));
  } else {
    const std::vector<Halide::Expr> values = output_values(r, coords);
    const Halide::Expr index = flat_index(coords, r.extents);
    for (size_t o = 0; o < values.size(); ++o) {
      const BufferArg &out = r.output_buffers[o];
      const Halide::Expr v = Halide::cast(out.type, values[o]);
      stores.push_back(r.output == ReductionKernelRequest::Output::atomic_sum
                           ? intrinsic::atomic_add({out.name, index, v})
                           : store(out.name, v, index));
    }
  }
  Stmt body = Block::make(stores);
  for (int c = s.size() - 1; c >= 0; --c) body = LetStmt::make(s[c].as<Variable>()->name, state[c], body);
  return body;
}

std::vector<StagePlan> plan_write_backs(const ReductionKernelRequest &r, const LoopStructure &loops,
                                        std::string &summary) {
  TWIST_CHECK(r.output == ReductionKernelRequest::Output::values, "write-back tiles of partial states");
  std::vector<Halide::Expr> coords;
  for (const Var &v : r.reduction.definition().args) coords.push_back(loops.value_of.at(v.name()));
  std::vector<StagePlan> plans;
  int bytes = 0;
  for (const BufferArg &out : r.output_buffers) {
    plans.push_back(plan_write_back(out.name, out.type, out.shape, loops, coords, r.fallback));
    bytes += plans.back().bytes();
  }
  // Tiles too large for the target's shared memory (where the staged inputs alone are not) are stored
  // directly instead: the write-back is an optimization, never the reason a schedule is refused.
  if (bytes > r.target.max_shared_bytes_per_block) plans.clear();
  for (const StagePlan &p : plans) summary += p.summary();
  return plans;
}

bool reads_inputs(const Stmt &s, const FuncGraph &graph) {
  struct Reads : IRVisitor {
    const std::vector<Input> &inputs;
    bool found = false;
    explicit Reads(const std::vector<Input> &i) : inputs(i) {}
    using IRVisitor::visit;
    void visit(const Load *l) override {
      for (const Input &in : inputs) found = found || l->name == in.name();
      IRVisitor::visit(l);
    }
  } reads(graph.inputs);
  s.accept(&reads);
  return reads.found;
}

Stmt write_back(const std::vector<StagePlan> &write_backs, const std::vector<Halide::Expr> &coords,
                const Stmt &stores, int threads, const Stmt &sync) {
  struct IntoTiles : IRMutator {
    const std::vector<StagePlan> &tiles;
    const std::vector<Halide::Expr> &coords;
    IntoTiles(const std::vector<StagePlan> &t, const std::vector<Halide::Expr> &c) : tiles(t), coords(c) {}
    using IRMutator::visit;
    Stmt visit(const Store *op) override {
      for (const StagePlan &p : tiles)
        if (op->name == p.input) return store(p.buffer, op->value, p.index_of(coords, 0));
      return IRMutator::visit(op);
    }
  } into_tiles(write_backs, coords);
  std::vector<Stmt> steps = {sync, into_tiles.mutate(stores), sync};
  for (const StagePlan &p : write_backs) steps.push_back(p.copy(Halide::Expr(), 0, threads));
  return block(steps);
}

}  // namespace twist
