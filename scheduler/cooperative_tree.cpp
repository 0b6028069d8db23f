#include "scheduler/cooperative_tree.h"

#include <algorithm>

#include "lang/error.h"
#include "scheduler/intrinsics.h"
#include "scheduler/stmt_building.h"

namespace twist {

using namespace Halide::Internal;
using namespace twist::stmt;

namespace {

constexpr int kWarp = 32;

bool by_threads(Binding b) {
  return b == Binding::thread || b == Binding::warp;
}
bool serial(Binding b) {
  return b == Binding::serial || b == Binding::unrolled;
}

// Replaces the serial reduction loops (adjacent, outermost first) by one flat loop dealt to `threads`
// threads, the original loops recovered from flat and flat < (their points) guarded. `in_turn` (for a
// commutative monoid): flat = serial * threads + lane, so a warp's loads are coalesced, or with runs of
// `width` > 1 consecutive points flat = (serial * threads + lane) * width + vector, both serial loops
// unrolled (the runs of a row kept in registers); otherwise each lane folds a contiguous run,
// flat = lane * run + serial, so that the lanes' states are in the points' order.
void deal_to_threads(LoopStructure &loops, int threads, const std::string &prefix, bool in_turn, int width) {
  std::vector<int> at;
  for (size_t k = 0; k < loops.dims.size(); ++k)
    if (loops.dims[k].reduction && serial(loops.dims[k].binding)) at.push_back(static_cast<int>(k));
  if (at.empty()) return;
  for (size_t k = 1; k < at.size(); ++k)
    if (at[k] != at[k - 1] + 1)
      fail(
          "schedule of '{}': the default tree deals its serial reduction loops to threads as one, but they "
          "are "
          "not adjacent (the loops are {}); bind a reduction loop to threads yourself",
          loops.func, loops.names());
  const bool runs = in_turn && width > 1;
  const LoopDim serial_dim{prefix + ".serial", Halide::Expr(), true,
                           runs ? Binding::unrolled : Binding::serial};
  const LoopDim lane_dim{prefix + ".lane", Halide::Expr(threads), true, Binding::thread};
  const LoopDim vector_dim{prefix + ".vector", Halide::Expr(width), true, Binding::unrolled};
  Halide::Expr points = 1;
  for (int k : at) points = points * loops.dims[k].extent;
  const int per_serial = threads * (runs ? width : 1);
  const Halide::Expr run = simplify((points + (per_serial - 1)) / per_serial);
  const Halide::Expr flat = runs ? (serial_dim.var() * threads + lane_dim.var()) * width + vector_dim.var()
                            : in_turn ? serial_dim.var() * threads + lane_dim.var()
                                      : lane_dim.var() * run + serial_dim.var();
  Halide::Expr stride = 1;
  std::map<std::string, Halide::Expr> values;
  for (auto it = at.rbegin(); it != at.rend(); ++it) {
    const LoopDim &d = loops.dims[*it];
    values[d.name] = it == at.rend() - 1 ? flat / stride : (flat / stride) % d.extent;
    stride = stride * d.extent;
  }
  for (auto *m : {&loops.value_of, &loops.unclamped_value_of})
    for (auto &[name, v] : *m) v = simplify(substitute(values, v));
  for (Halide::Expr &g : loops.reduction_guards) g = simplify(substitute(values, g));
  loops.reduction_guards.push_back(simplify(flat < points));
  // Guards that the dealt loops' ranges imply (where the threads' points tile the reduction exactly) are
  // dropped: each is a compare and a branch around every element of a row kept in registers.
  Scope<Interval> ranges;
  ranges.push(lane_dim.name, Interval(0, threads - 1));
  if (runs) ranges.push(vector_dim.name, Interval(0, width - 1));
  if (is_const(run)) ranges.push(serial_dim.name, Interval(0, simplify(run - 1)));
  std::vector<Halide::Expr> needed;
  for (const Halide::Expr &g : loops.reduction_guards)
    if (!can_prove(g, ranges)) needed.push_back(g);
  loops.reduction_guards = needed;
  LoopDim s = serial_dim;
  s.extent = run;
  loops.dims.erase(loops.dims.begin() + at.front(), loops.dims.begin() + at.back() + 1);
  // Outermost first in the order of the points: the lane is the outer digit of flat when runs are contiguous.
  loops.dims.insert(loops.dims.begin() + at.front(),
                    runs      ? std::initializer_list<LoopDim>{s, lane_dim, vector_dim}
                    : in_turn ? std::initializer_list<LoopDim>{s, lane_dim}
                              : std::initializer_list<LoopDim>{lane_dim, s});
}

std::string array(const CooperativeTree &t, const char *what, const Component &c) {
  return fmt::format("{}.{}.{}", t.reduction.name(), what, c.name);
}

// The warp's lanes combine their states pairwise over the lane bits in `masks`, keeping the points' order:
// the lane whose bit is set holds the later points, so its state is the right operand.
Stmt butterfly(const CooperativeTree &t, const Monoid &m, const std::vector<int> &masks) {
  const Halide::Expr lane = intrinsic::thread_index() % kWarp;
  std::vector<Stmt> steps;
  for (int mask : masks) {
    std::vector<Stmt> shuffles, stores;
    std::vector<std::pair<std::string, Halide::Expr>> lets;
    std::map<std::string, Halide::Expr> mine_first, theirs_first;
    for (size_t c = 0; c < m.state.size(); ++c) {
      const std::string state = array(t, "state", m.state[c]), peer = array(t, "peer", m.state[c]);
      shuffles.push_back(intrinsic::shuffle_xor({peer, 0, load(m.state[c].type, state, 0), mask}));
      const std::string mine = array(t, "mine", m.state[c]), theirs = array(t, "theirs", m.state[c]);
      lets.push_back({mine, load(m.state[c].type, state, 0)});
      lets.push_back({theirs, load(m.state[c].type, peer, 0)});
      const std::string a = m.lhs()[c].as<Variable>()->name, b = m.rhs()[c].as<Variable>()->name;
      mine_first[a] = Variable::make(m.state[c].type, mine);
      mine_first[b] = Variable::make(m.state[c].type, theirs);
      theirs_first[a] = Variable::make(m.state[c].type, theirs);
      theirs_first[b] = Variable::make(m.state[c].type, mine);
    }
    for (size_t c = 0; c < m.state.size(); ++c)
      stores.push_back(store(array(t, "state", m.state[c]),
                             Halide::select((lane & mask) != 0, substitute(theirs_first, m.combine[c]),
                                            substitute(mine_first, m.combine[c])),
                             0));
    steps.push_back(block({block(shuffles), let_all(lets, block(stores))}));
  }
  return block(steps);
}

std::vector<int> masks_below(int lanes) {
  std::vector<int> masks;
  int top = 1;
  while (top < lanes) top *= 2;
  // Lowest bit first: after mask m each lane holds the combined run of the 2m lanes around it, in order.
  for (int mask = 1; mask < top; mask *= 2) masks.push_back(mask);
  return masks;
}

}  // namespace

bool binds_reduction_to_threads(const Func &f, const FuncSchedule *schedule) {
  if (!schedule || !f.definition().is_reduction()) return false;
  const std::vector<Halide::Expr> extents(f.definition().args.size(), Halide::Expr(1));
  for (const LoopDim &d : make_loops(f, extents, schedule).dims)
    if (d.reduction && by_threads(d.binding)) return true;
  return false;
}

CooperativeTree plan_tree(const Func &reduction, const FuncSchedule *schedule, int default_threads,
                          int run_width) {
  CooperativeTree t;
  t.reduction = reduction;
  const std::string &name = reduction.name();
  std::vector<Halide::Expr> extents;
  for (const Var &v : reduction.definition().args)
    extents.push_back(Variable::make(Halide::Int(32), v.name() + ".extent"));
  t.loops = make_loops(reduction, extents, schedule);
  if (schedule && schedule->reduction_split()) {
    const ReductionSplit &s = *schedule->reduction_split();
    if (s.combine != SplitCombine::kernel)
      fail(
          "schedule of '{}': a cooperative tree split with split_reduction combines its parts with a kernel "
          "(neither atomics nor the last block of a tile); use SplitCombine::kernel",
          name);
    t.part_loop = s.var + ".part";
    split_into_parts(t.loops, s.var, t.part_loop, s.parts, Binding::block_y);
  }
  for (const LoopDim &d : t.loops.dims) {
    if (!d.reduction) continue;
    if (d.binding == Binding::thread) {
      if (!t.lane_loop.empty())
        fail("schedule of '{}': reduction loops '{}' and '{}' are both bound to threads; fuse them first",
             name, t.lane_loop, d.name);
      t.lane_loop = d.name;
    } else if (d.binding == Binding::warp) {
      if (!t.warp_loop.empty())
        fail("schedule of '{}': reduction loops '{}' and '{}' are both bound to warps; fuse them first", name,
             t.warp_loop, d.name);
      t.warp_loop = d.name;
    } else if (!serial(d.binding) && d.name != t.part_loop) {
      fail(
          "schedule of '{}': reduction loop '{}' is bound to {}; a tree binds reduction loops to threads and "
          "warps, "
          "and split_reduction spreads them over blocks",
          name, d.name, to_string(d.binding));
    }
  }
  if (t.lane_loop.empty() && !t.warp_loop.empty())
    fail(
        "schedule of '{}': reduction loop '{}' is bound to warps, so bind a loop of 32 to the lanes "
        "(threads) too",
        name, t.warp_loop);
  const Monoid &monoid = *reduction.definition().reduction->monoid;
  if (t.lane_loop.empty()) {
    deal_to_threads(t.loops, default_threads, name, monoid.commutative, run_width);
    t.lane_loop = name + ".lane";
    if (t.loops.index(name + ".vector") >= 0) {
      t.run_loop = name + ".serial";
      t.vector_loop = name + ".vector";
    }
    t.summary += fmt::format("  {}: default tree, its points dealt {} to {} threads\n", name,
                             !monoid.commutative ? "in contiguous runs"
                             : t.vector_loop.empty()
                                 ? "in turn"
                                 : fmt::format("in turn in runs of {} consecutive points", run_width),
                             default_threads);
  }
  if (!monoid.commutative) {
    // The parts, warps and lanes combine in their index order, so they must split the points into runs.
    std::vector<std::string> reduction_loops, distributed;
    for (const LoopDim &d : t.loops.dims)
      if (d.reduction) reduction_loops.push_back(d.name);
    for (const std::string &l : {t.part_loop, t.warp_loop, t.lane_loop})
      if (!l.empty()) distributed.push_back(l);
    if (!std::equal(distributed.begin(), distributed.end(), reduction_loops.begin()))
      fail(
          "schedule of '{}': its monoid '{}' is not known to be commutative, so a tree must keep the points "
          "in order: the reduction loops split across blocks, bound to warps and bound to threads ({}) must "
          "be "
          "the outermost reduction loops, in that order (the loops are {}); split the reduction loop and "
          "bind "
          "its outer part to threads",
          name, monoid.name, fmt::join(distributed, ", "), t.loops.names());
  }
  const int lanes = t.loops.dim(t.lane_loop).constant_extent(name, "a loop bound to threads");
  const int warps =
      t.warp_loop.empty() ? 1 : t.loops.dim(t.warp_loop).constant_extent(name, "a loop bound to warps");
  if (!t.warp_loop.empty() && lanes != kWarp)
    fail(
        "schedule of '{}': loop '{}' is bound to the lanes of warps (another is bound to warps), so its "
        "extent must "
        "be 32, not {}",
        name, t.lane_loop, lanes);
  t.threads = lanes * warps;
  if (t.threads % kWarp != 0 || t.threads > 1024)
    fail(
        "schedule of '{}': the tree's loops bound to threads and warps give {} threads; a block's threads "
        "must be a "
        "multiple of 32 up to 1024 (whole warps shuffle)",
        name, t.threads);
  t.summary += fmt::format(
      "  {}: cooperative tree over {} threads ({} warp(s)): sequential folds, {} shuffle(s) "
      "per state component, {}\n",
      name, t.threads, t.threads / kWarp, masks_below(kWarp).size(),
      t.threads > kWarp ? "warps combined through shared memory" : "one warp");
  return t;
}

Stmt tree_fold(const CooperativeTree &t, ExprLowering lowering, const Stmt &then,
               const std::function<Stmt(const Stmt &)> &around_run) {
  const Definition &d = t.reduction.definition();
  const Monoid &m = *d.reduction->monoid;
  const int warps = t.threads / kWarp;
  for (int k = 0; k < d.reduction->domain.dimensions(); ++k) {
    const std::string r = d.reduction->domain[k].name();
    lowering.bind(r, t.loops.value_of.at(r));
  }
  // state = combine(state, lift(elements)) at this thread's points.
  const State a = m.lhs(), b = m.rhs(), x = m.element();
  std::vector<std::pair<std::string, Halide::Expr>> lets;
  for (int e = 0; e < x.size(); ++e)
    lets.push_back({x[e].as<Variable>()->name, lowering.lower(d.reduction->elements[e])});
  for (size_t c = 0; c < m.state.size(); ++c) lets.push_back({b[c].as<Variable>()->name, m.lift[c]});
  for (size_t c = 0; c < m.state.size(); ++c)
    lets.push_back({a[c].as<Variable>()->name, load(m.state[c].type, array(t, "state", m.state[c]), 0)});
  std::vector<Stmt> folds, inits, publish, gather, to_warps;
  for (size_t c = 0; c < m.state.size(); ++c) {
    folds.push_back(store(array(t, "state", m.state[c]), m.combine[c], 0));
    inits.push_back(store(array(t, "state", m.state[c]), m.identity[c], 0));
    publish.push_back(
        store(array(t, "result", m.state[c]), load(m.state[c].type, array(t, "state", m.state[c]), 0), 0));
  }
  std::vector<Halide::Expr> guards;
  for (const Halide::Expr &g : t.loops.reduction_guards) guards.push_back(lowering.lower(g));
  Stmt fold = guarded(all_of(guards), let_all(lets, block(folds)));
  for (auto it = t.loops.dims.rbegin(); it != t.loops.dims.rend(); ++it)
    if (it->reduction && serial(it->binding)) {
      if (around_run && it->name == t.run_loop) fold = around_run(fold);
      fold = For::make(it->name, 0, it->extent,
                       it->binding == Binding::unrolled ? ForType::Unrolled : ForType::Serial,
                       Halide::DeviceAPI::None, fold);
    }
  const Halide::Expr lane = intrinsic::thread_index() % kWarp, warp = intrinsic::thread_index() / kWarp;
  std::vector<Stmt> steps = {block(inits), fold, butterfly(t, m, masks_below(kWarp))};
  if (warps > 1) {
    for (size_t c = 0; c < m.state.size(); ++c) {
      const Component &s = m.state[c];
      to_warps.push_back(store(array(t, "warps", s), load(s.type, array(t, "state", s), 0), warp));
      gather.push_back(
          store(array(t, "state", s),
                Halide::select(lane < warps, load(s.type, array(t, "warps", s), Halide::min(lane, warps - 1)),
                               m.identity[c]),
                0));
    }
    steps.push_back(guarded(lane == 0, block(to_warps)));
    steps.push_back(intrinsic::barrier());
    steps.push_back(guarded(warp == 0, block({block(gather), butterfly(t, m, masks_below(warps)),
                                              guarded(lane == 0, block(publish))})));
  } else {
    steps.push_back(guarded(intrinsic::thread_index() == 0, block(publish)));
  }
  steps.push_back(intrinsic::barrier());
  Stmt tree = block(steps);
  if (!t.warp_loop.empty()) tree = LetStmt::make(t.warp_loop, warp, tree);
  // (A default tree whose points the threads tile exactly may not read its lane at all.)
  if (stmt_uses_var(tree, t.lane_loop))
    tree = LetStmt::make(t.lane_loop, t.warp_loop.empty() ? intrinsic::thread_index() : lane, tree);
  for (const Component &c : m.state) {
    tree =
        Allocate::make(array(t, "state", c), c.type, Halide::MemoryType::Register, {1}, const_true(), tree);
    tree = Allocate::make(array(t, "peer", c), c.type, Halide::MemoryType::Register, {1}, const_true(), tree);
    if (warps > 1)
      tree = Allocate::make(array(t, "warps", c), c.type, Halide::MemoryType::GPUShared, {warps},
                            const_true(), tree);
  }
  Stmt body = block({tree, then});
  for (const Component &c : m.state)
    body =
        Allocate::make(array(t, "result", c), c.type, Halide::MemoryType::GPUShared, {1}, const_true(), body);
  return body;
}

std::vector<Halide::Expr> tree_state(const CooperativeTree &t) {
  std::vector<Halide::Expr> state;
  for (const Component &c : t.reduction.definition().reduction->monoid->state)
    state.push_back(load(c.type, array(t, "result", c), 0));
  return state;
}

std::vector<Halide::Expr> tree_values(const CooperativeTree &t) {
  const Monoid &m = *t.reduction.definition().reduction->monoid;
  const std::vector<Halide::Expr> state = tree_state(t);
  std::map<std::string, Halide::Expr> s;
  for (size_t c = 0; c < m.state.size(); ++c) s[m.one()[c].as<Variable>()->name] = state[c];
  std::vector<Halide::Expr> values;
  for (const Expr &f : m.finalize) values.push_back(substitute(s, f));
  return values;
}

}  // namespace twist
