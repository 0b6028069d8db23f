#include "scheduler/epilogue.h"

#include <map>

#include "lang/error.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/intrinsics.h"
#include "scheduler/stmt_building.h"

namespace twist {

using namespace Halide::Internal;
using namespace twist::stmt;

namespace {

// The values the output stores: the monoid's finalize, or the fused consumer's values with its calls of the
// reduction replaced by them (by those of `finalized_pair` where it reads the second column of a pair).
std::vector<Halide::Expr> output_values(const ReductionKernelRequest &r,
                                        const std::vector<Halide::Expr> &coords,
                                        const std::vector<Halide::Expr> &finalized,
                                        const std::vector<Halide::Expr> &finalized_pair,
                                        const ExprLowering::FuncCallHook &other_reads) {
  if (!r.consumer) return finalized;
  const Definition &cd = r.consumer->definition();
  const std::vector<Halide::Expr> at = output_coords(r, coords);
  ExprLowering lowering(*r.graph);
  read_intermediates(lowering, r.intermediates);
  for (size_t k = 0; k < cd.args.size(); ++k) lowering.bind(cd.args[k].name(), at[k]);
  const std::string &reduction = r.reduction.name();
  lowering.on_func_call([&](const Call *c,
                            const std::vector<Halide::Expr> &args) -> std::optional<Halide::Expr> {
    if (other_reads)
      if (std::optional<Halide::Expr> v = other_reads(c, args)) return v;
    if (c->name != reduction) return std::nullopt;
    int64_t column = 0;  // of the pair
    for (size_t k = 0; k < args.size(); ++k) {
      const bool paired = static_cast<int>(k) == r.paired_dim;
      const std::optional<int64_t> offset = constant_value(args[k] - (paired ? 2 * at[k] : at[k]));
      if (!offset || *offset < 0 || *offset > (paired ? 1 : 0))
        fail("func '{}' reads '{}' at another point than its own{}, so it cannot be fused as its epilogue",
             r.consumer->name(), reduction, r.paired_dim >= 0 ? " or its column pair" : "");
      if (paired) column = *offset;
    }
    return (column ? finalized_pair : finalized)[c->value_index];
  });
  std::vector<Halide::Expr> values;
  for (const Expr &v : cd.values) values.push_back(lowering.lower(v));
  return values;
}

}  // namespace

std::vector<Halide::Expr> output_coords(const ReductionKernelRequest &r,
                                        const std::vector<Halide::Expr> &coords) {
  std::vector<Halide::Expr> at = coords;
  if (r.paired_dim >= 0) at[r.paired_dim] = simplify(at[r.paired_dim] / 2);
  return at;
}

std::vector<Halide::Expr> output_extents(const ReductionKernelRequest &r) {
  std::vector<Halide::Expr> extents = r.extents;
  if (r.paired_dim >= 0) extents[r.paired_dim] = simplify(extents[r.paired_dim] / 2);
  return extents;
}

Stmt epilogue_stores(const ReductionKernelRequest &r, const std::vector<Halide::Expr> &coords,
                     const std::vector<Halide::Expr> &state, const Halide::Expr &part,
                     const std::vector<Halide::Expr> &pair_state,
                     const ExprLowering::FuncCallHook &other_reads) {
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
    const std::vector<Halide::Expr> finalized(m.finalize.begin(), m.finalize.end());
    std::vector<Halide::Expr> finalized_pair;
    if (r.paired_dim >= 0) {
      TWIST_CHECK(pair_state.size() == static_cast<size_t>(s.size()),
                  "the state of a column pair's second point");
      std::map<std::string, Halide::Expr> second;
      for (int c = 0; c < s.size(); ++c) second[s[c].as<Variable>()->name] = pair_state[c];
      for (const Halide::Expr &f : finalized) finalized_pair.push_back(substitute(second, f));
    }
    const std::vector<Halide::Expr> values = output_values(r, coords, finalized, finalized_pair, other_reads);
    const Halide::Expr index = flat_index(output_coords(r, coords), output_extents(r));
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

namespace {

// Refuses a TMA store (FuncSchedule::store_output(Transport::tma)) of the write-back `p` on a target or of
// a type that TMA cannot store, saying why; plan_tma_boxes refuses the tiles it cannot box.
void check_tma_store(const ReductionKernelRequest &r, const StagePlan &p) {
  const std::string &fname = r.reduction.name();
  if (!r.target.has_tma)
    fail(
        "schedule of '{}': store_output(Transport::tma) stores '{}' with TMA, which {} does not have; lower "
        "for Target::sm90a() or use store_output(Transport::plain)",
        fname, p.input, r.target.arch);
  const Type t = p.type;
  if (!(t == f16 || t == bf16 || t == f32 || t == f64 || t == Halide::Int(32)))
    fail(
        "schedule of '{}': store_output(Transport::tma) stores '{}' of type {}, which TMA does not copy "
        "(f16, "
        "bf16, f32, f64, i32); use store_output(Transport::plain)",
        fname, p.input, type_name(t));
}

// Gives the TMA write-back `p` the schedule's sub-tile buffers (FuncSchedule::store_output_sub_tiles), if
// any: the slot then holds that many boxes rather than the whole tile.
void sub_tile(const ReductionKernelRequest &r, StagePlan &p, size_t outputs) {
  const int buffers = r.schedule->output_sub_tile_buffers();
  if (!buffers) return;
  const std::string &fname = r.reduction.name();
  if (outputs != 1)
    fail(
        "schedule of '{}': store_output_sub_tiles({}) with {} outputs: the boxes of one output's tile go out "
        "in turn, and outputs of different element types split into different boxes; drop "
        "store_output_sub_tiles",
        fname, buffers, outputs);
  if (r.schedule->stmatrix_writes())
    fail(
        "schedule of '{}': store_output_sub_tiles({}) with stmatrix writes: stmatrix writes the whole tile "
        "at once; use store_output(Transport::tma, false) with sub-tiles",
        fname, buffers);
  p.sub_tile_buffers = buffers;
  p.slot_elems = p.rows * p.box_cols * std::min(buffers, p.tma_box_count());
}

}  // namespace

std::vector<StagePlan> plan_write_backs(const ReductionKernelRequest &r, const LoopStructure &loops,
                                        std::string &summary) {
  TWIST_CHECK(r.output == ReductionKernelRequest::Output::values, "write-back tiles of partial states");
  std::vector<Halide::Expr> point;
  for (const Var &v : r.reduction.definition().args) point.push_back(loops.value_of.at(v.name()));
  const std::vector<Halide::Expr> coords = output_coords(r, point);
  const Transport transport = r.schedule ? r.schedule->output_transport() : Transport::plain;
  std::vector<StagePlan> plans;
  int bytes = 0;
  for (const BufferArg &out : r.output_buffers) {
    plans.push_back(plan_write_back(out.name, out.type, out.shape, loops, coords, r.fallback));
    if (transport == Transport::tma) {
      check_tma_store(r, plans.back());
      plans.back() =
          plan_write_back(out.name, out.type, out.shape, loops, coords, r.fallback, Transport::tma);
      sub_tile(r, plans.back(), r.output_buffers.size());
    }
    bytes += plans.back().bytes();
  }
  // Tiles too large for the target's shared memory (where the staged inputs alone are not) are stored
  // directly instead, TMA stores included: the write-back is an optimization, never the reason a schedule is
  // refused.
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

namespace {

// The epilogue of a sub-tiled TMA write-back `p`: the tile's boxes in turn, each written by the threads
// (`stores` with the stores of other boxes' elements dropped) into its buffer and stored by thread 0. Before
// a buffer is written again, thread 0 waits until at most buffers - 1 bulk stores still read (those of the
// boxes just before, in other buffers; across output tiles too when the boxes divide into the buffers, else
// the first box waits for all), and the barrier passes that on.
Stmt write_back_by_boxes(const StagePlan &p, const std::vector<Halide::Expr> &coords, const Stmt &stores,
                         const Stmt &sync, const Halide::Expr &slot) {
  struct IntoBox : IRMutator {
    const StagePlan &tile;
    const std::vector<Halide::Expr> &coords;
    const Halide::Expr &slot;
    int box = 0;
    IntoBox(const StagePlan &t, const std::vector<Halide::Expr> &c, const Halide::Expr &s)
        : tile(t), coords(c), slot(s) {}
    using IRMutator::visit;
    Stmt visit(const Store *op) override {
      if (op->name != tile.input) return IRMutator::visit(op);
      return guarded(tile.box_of(coords) == box,
                     store(tile.buffer, op->value, tile.thread_index_of(coords, slot)));
    }
  } into_box(p, coords, slot);
  const int boxes = p.tma_box_count(), buffers = std::min(p.sub_tile_buffers, boxes);
  std::vector<Stmt> steps;
  for (int b = 0; b < boxes; ++b) {
    into_box.box = b;
    const int pending = b == 0 && boxes % buffers != 0 ? 0 : buffers - 1;
    // Simplified with the points' coordinates bound, each store's box is a constant, and the stores of the
    // other boxes drop out.
    steps.insert(steps.end(), {guarded(intrinsic::thread_index() == 0, intrinsic::tma_store_wait(pending)),
                               sync, simplify(into_box.mutate(stores)), intrinsic::fence_proxy_async(), sync,
                               guarded(intrinsic::thread_index() == 0,
                                       block({p.tma_store_box(b, slot), intrinsic::tma_store_commit()}))});
  }
  return block(steps);
}

}  // namespace

Stmt write_back(const std::vector<StagePlan> &write_backs, const std::vector<Halide::Expr> &coords,
                const Stmt &stores, int threads, const Stmt &sync, const Halide::Expr &slot) {
  struct IntoTiles : IRMutator {
    const std::vector<StagePlan> &tiles;
    const std::vector<Halide::Expr> &coords;
    const Halide::Expr &slot;
    IntoTiles(const std::vector<StagePlan> &t, const std::vector<Halide::Expr> &c, const Halide::Expr &s)
        : tiles(t), coords(c), slot(s) {}
    using IRMutator::visit;
    Stmt visit(const Store *op) override {
      for (const StagePlan &p : tiles)
        if (op->name == p.input) return store(p.buffer, op->value, p.thread_index_of(coords, slot));
      return IRMutator::visit(op);
    }
  } into_tiles(write_backs, coords, slot);
  if (write_backs.size() == 1 && write_backs[0].sub_tile_buffers)
    return write_back_by_boxes(write_backs[0], coords, stores, sync, slot);
  std::vector<Stmt> tma_stores;
  for (const StagePlan &p : write_backs)
    if (p.directive.transport == Transport::tma) tma_stores.push_back(p.tma_stores(slot));
  if (tma_stores.empty()) {
    std::vector<Stmt> steps = {sync, into_tiles.mutate(stores), sync};
    for (const StagePlan &p : write_backs) steps.push_back(p.copy(Halide::Expr(), slot, threads));
    return block(steps);
  }
  // The TMA stores read the tiles through the async proxy after the threads' writes (made visible to it by
  // each writer's fence and ordered by the barrier); before the tiles are written again, the issuing thread
  // waits until the previous tile's stores have read them (which the barrier then passes on to the others).
  std::vector<Stmt> steps = {drain_tma_stores(write_backs), sync, into_tiles.mutate(stores),
                             intrinsic::fence_proxy_async(), sync};
  for (const StagePlan &p : write_backs)
    if (p.directive.transport != Transport::tma) steps.push_back(p.copy(Halide::Expr(), slot, threads));
  tma_stores.push_back(intrinsic::tma_store_commit());
  steps.push_back(guarded(intrinsic::thread_index() == 0, block(tma_stores)));
  return block(steps);
}

Stmt drain_tma_stores(const std::vector<StagePlan> &write_backs) {
  for (const StagePlan &p : write_backs)
    if (p.directive.transport == Transport::tma)
      return guarded(intrinsic::thread_index() == 0, intrinsic::tma_store_wait(0));
  return Stmt();
}

}  // namespace twist
