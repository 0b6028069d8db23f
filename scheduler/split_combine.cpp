#include "scheduler/split_combine.h"

#include <algorithm>

#include "lang/error.h"
#include "scheduler/epilogue.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/intrinsics.h"
#include "scheduler/kernel_assembly.h"
#include "scheduler/loops.h"
#include "scheduler/pointwise_kernel.h"
#include "scheduler/stmt_building.h"
#include "scheduler/thread_mapping.h"

namespace twist {

using namespace Halide::Internal;

namespace {

constexpr int kMaxChains = kSplitCombineChains;

bool is_block(Binding b) {
  return b == Binding::block_x || b == Binding::block_y || b == Binding::block_z;
}

// The last-arriving block's fold of its tile: every point of the tile that the output holds, spread over the
// first `threads` threads. The tile's points are those of the pure loops no block index covers.
Stmt fold_tile(const ReductionKernelRequest &values, const std::vector<BufferArg> &partials, int parts,
               int &threads) {
  const FuncSchedule &s = *values.schedule;
  LoopStructure loops = make_loops(values.reduction, values.extents, &s);
  split_into_parts(loops, s.reduction_split()->var, s.reduction_split()->var + ".part", parts,
                   Binding::block_z);
  const ThreadMapping mapping =
      map_threads(loops, s.block_launch_order(), s.atom().has_value(), values.target);
  threads = mapping.threads;
  // The loops' variables under names of their own: the parts kernel's body defines the same names in scopes
  // the fold is not in.
  std::map<std::string, Halide::Expr> renamed;
  for (const LoopDim &d : loops.dims) renamed[d.name] = stmt::var("fold." + d.name);
  std::vector<std::pair<std::string, Halide::Expr>> lets;
  for (const auto &[name, value] : mapping.bound_values)
    if (is_block(loops.dim(name).binding) && !loops.dim(name).reduction)
      lets.push_back({"fold." + name, value});
  std::vector<const LoopDim *> tile;
  Halide::Expr points = 1;
  for (const LoopDim &d : loops.dims)
    if (!d.reduction && !is_block(d.binding)) {
      tile.push_back(&d);
      points = simplify(points * d.extent);
    }
  // The loops of the output's innermost coordinates innermost: neighbouring threads then fold neighbouring
  // elements, and a tile whose rows are mostly outside the output (a decode tile's 16 rows over one query
  // head) keeps its threads on the rows that are there.
  const std::vector<Var> &args = values.reduction.definition().args;
  auto innermost_use = [&](const LoopDim *d) {
    int last = -1;
    for (size_t k = 0; k < args.size(); ++k)
      if (expr_uses_var(loops.value_of.at(args[k].name()), d->name)) last = static_cast<int>(k);
    return last;
  };
  std::stable_sort(tile.begin(), tile.end(),
                   [&](const LoopDim *a, const LoopDim *b) { return innermost_use(a) < innermost_use(b); });
  const Halide::Expr point = stmt::var("fold.point");
  std::vector<std::pair<std::string, Halide::Expr>> at_point;
  Halide::Expr rest = point;
  for (size_t k = tile.size(); k-- > 0;) {
    at_point.insert(at_point.begin(), {"fold." + tile[k]->name, k == 0 ? rest : rest % tile[k]->extent});
    rest = rest / tile[k]->extent;
  }
  std::vector<Halide::Expr> coords;
  for (const Var &v : args) coords.push_back(simplify(substitute(renamed, loops.value_of.at(v.name()))));
  const Halide::Expr inside = simplify(substitute(renamed, stmt::all_of(loops.pure_guards)));
  const Stmt one =
      stmt::let_all(at_point, stmt::guarded(inside, fold_parts(values, partials, parts, coords)));
  const Halide::Expr step = stmt::var("fold.step");
  const Stmt each = For::make("fold.step", 0, simplify((points + (threads - 1)) / threads), ForType::Serial,
                              Halide::DeviceAPI::None,
                              LetStmt::make("fold.point", step * threads + intrinsic::thread_index(),
                                            IfThenElse::make(point < points, one)));
  return stmt::let_all(lets, each);
}

void append_last_block_fold(Kernel &k, const ReductionKernelRequest &values,
                            const std::vector<BufferArg> &partials, int parts, const BufferArg &counters) {
  int fold_threads = 0;
  Stmt fold = fold_tile(values, partials, parts, fold_threads);
  // A warp-specialized kernel's producer warpgroup (past the bound threads) keeps its few registers.
  if (fold_threads < k.threads) fold = stmt::guarded(intrinsic::thread_index() < fold_threads, fold);
  const Halide::Expr tile = intrinsic::block_index(0) + intrinsic::block_index(1) * k.grid[0];
  const std::string ticket = "split.ticket";
  const Halide::Expr first = intrinsic::thread_index() == 0;
  // Release: every thread's part stores are fenced before the block's ticket says they are there. Acquire:
  // the last block fences after seeing its ticket, before it reads the other blocks' parts.
  const Stmt last = stmt::block(
      {intrinsic::threadfence(), fold, stmt::guarded(first, stmt::store(counters.name, 0, tile))});
  Stmt tail = stmt::block({
      intrinsic::threadfence(),
      intrinsic::barrier(),
      stmt::guarded(first, intrinsic::arrival_ticket({counters.name, tile, ticket, 0})),
      intrinsic::barrier(),
      IfThenElse::make(load(Halide::Int(32), ticket, 0) == parts - 1, last),
  });
  tail = Allocate::make(ticket, Halide::Int(32), Halide::MemoryType::GPUShared, {1}, const_true(), tail);
  k.body = Block::make(k.body, simplify_exprs(tail));
  k.shared_bytes = std::max(k.shared_bytes, shared_arrays(k.body).bytes);
  std::vector<BufferArg> outputs = partials;
  outputs.insert(outputs.end(), values.output_buffers.begin(), values.output_buffers.end());
  outputs.push_back(counters);
  collect_arguments(*values.graph, k, outputs, values.intermediates);
}

}  // namespace

namespace {

// The fold of the parts' states at the reduction's point `point` into the register arrays named `prefix` +
// component (their element 0 ends with the folded state). The parts go into `chains` folds of consecutive
// parts (chain c folds parts c * run .. c * run + run - 1, the last chains fewer or none where `chains` does
// not divide the parts), which are then combined pairwise in order, neighbours first: a reassociation of the
// fold that the split's own associativity check already approved, keeping the parts' order (the monoid need
// not commute). The chains' loads are independent, so a thread waits `run` times for memory instead of
// `parts` times: with few points (decoding: batch x heads x the head dimension) the fold is a chain of load
// latencies, not a stream of bytes.
Stmt fold_point(const ReductionKernelRequest &values, const std::vector<BufferArg> &partials, int parts,
                const std::vector<Halide::Expr> &point, const std::string &prefix) {
  const Monoid &m = *values.reduction.definition().reduction->monoid;
  const int chains = std::min(parts, kMaxChains);
  const int run = (parts + chains - 1) / chains;
  const State a = m.lhs(), b = m.rhs();
  std::vector<Halide::Expr> shape = {Halide::Expr(parts)};
  shape.insert(shape.end(), values.extents.begin(), values.extents.end());
  // state[into] = combine(state[into], b), with b's components given by `rhs`.
  auto combine_into = [&](const Halide::Expr &into, const std::function<Halide::Expr(size_t)> &rhs) {
    std::vector<Stmt> stores;
    for (size_t c = 0; c < m.state.size(); ++c)
      stores.push_back(stmt::store(prefix + m.state[c].name, m.combine[c], into));
    std::vector<std::pair<std::string, Halide::Expr>> operands;
    for (size_t c = 0; c < m.state.size(); ++c) {
      operands.push_back({a[c].as<Variable>()->name, load(m.state[c].type, prefix + m.state[c].name, into)});
      operands.push_back({b[c].as<Variable>()->name, rhs(c)});
    }
    return stmt::let_all(operands, Block::make(stores));
  };
  const Halide::Expr chain = stmt::var("chain"), step = stmt::var("step");
  const Halide::Expr part = chain * run + step;
  std::vector<Halide::Expr> at = {part};
  at.insert(at.end(), point.begin(), point.end());
  Stmt fold = stmt::guarded(
      parts % chains == 0 ? const_true() : part < parts,
      combine_into(
          chain, [&](size_t c) { return load(m.state[c].type, partials[c].name, flat_index(at, shape)); }));
  std::vector<Stmt> steps;
  for (size_t c = 0; c < m.state.size(); ++c)
    steps.push_back(
        stmt::unrolled("chain", chains, stmt::store(prefix + m.state[c].name, m.identity[c], chain)));
  steps.push_back(For::make("step", 0, run, ForType::Serial, Halide::DeviceAPI::None,
                            stmt::unrolled("chain", chains, fold)));
  // Pairwise, neighbours first; a chain without a right neighbour (chains not a power of 2) waits.
  for (int stride = 1; stride < chains; stride *= 2)
    steps.push_back(stmt::unrolled(
        "chain", (chains + 2 * stride - 1) / (2 * stride),
        stmt::guarded(chains % (2 * stride) == 0 ? const_true() : chain * (2 * stride) + stride < chains,
                      combine_into(
                          chain * (2 * stride),
                          [&](size_t c) {
                            return load(m.state[c].type, prefix + m.state[c].name,
                                        chain * (2 * stride) + stride);
                          }))));
  return Block::make(steps);
}

}  // namespace

Stmt fold_parts(const ReductionKernelRequest &values, const std::vector<BufferArg> &partials, int parts,
                const std::vector<Halide::Expr> &coords) {
  const Monoid &m = *values.reduction.definition().reduction->monoid;
  auto folded = [&](const std::string &prefix) {
    std::vector<Halide::Expr> state;
    for (const Component &c : m.state) state.push_back(load(c.type, prefix + c.name, 0));
    return state;
  };
  // A consumer reading column pairs (ReductionKernelRequest::paired_dim) has its own points: each folds both
  // points of its pair.
  const int paired = values.paired_dim;
  std::vector<Halide::Expr> point = coords, pair;
  std::vector<std::string> prefixes = {"state."};
  if (paired >= 0) {
    point[paired] = 2 * coords[paired];
    pair = point;
    pair[paired] = point[paired] + 1;
    prefixes.push_back("pair.state.");
  }
  std::vector<Stmt> steps = {fold_point(values, partials, parts, point, prefixes[0])};
  if (paired >= 0) steps.push_back(fold_point(values, partials, parts, pair, prefixes[1]));
  steps.push_back(epilogue_stores(values, point, folded(prefixes[0]), Halide::Expr(),
                                  paired >= 0 ? folded(prefixes[1]) : std::vector<Halide::Expr>{}));
  Stmt body = Block::make(steps);
  const int chains = std::min(parts, kMaxChains);
  for (const std::string &prefix : prefixes)
    for (const Component &c : m.state)
      body =
          Allocate::make(prefix + c.name, c.type, Halide::MemoryType::Register, {chains}, const_true(), body);
  return body;
}

Kernel combine_kernel(const ReductionKernelRequest &values, const std::vector<BufferArg> &partials,
                      int parts) {
  const Monoid &m = *values.reduction.definition().reduction->monoid;
  Kernel k = pointwise_kernel(
      values.kernel_name, output_extents(values),
      [&](const std::vector<Halide::Expr> &coords) { return fold_parts(values, partials, parts, coords); });
  const int chains = std::min(parts, kMaxChains);
  k.schedule_summary = fmt::format(
      "  folds {} partial states per point with {}'s combine, in {} chains of up to {} consecutive parts{}\n",
      parts, m.name, chains, (parts + chains - 1) / chains,
      values.paired_dim >= 0 ? ", both points of each column pair per thread" : "");
  return k;
}

Halide::Expr counter_count(const Kernel &parts_kernel) {
  return simplify(parts_kernel.grid[0] * parts_kernel.grid[1]);
}

void combine_in_last_block(Kernel &parts_kernel, const ReductionKernelRequest &values,
                           const std::vector<BufferArg> &partials, int parts, const BufferArg &counters) {
  const FuncSchedule &s = *values.schedule;
  if (s.persistent_blocks() > 0)
    fail(
        "schedule of '{}': split_reduction with SplitCombine::last_block needs one block per part of each "
        "output tile, but persistent() gives blocks several tiles; drop persistent() or use "
        "SplitCombine::kernel",
        values.reduction.name());
  if (values.paired_dim >= 0)
    fail(
        "schedule of '{}': split_reduction with SplitCombine::last_block cannot finalize a consumer that "
        "reads "
        "'{}' at column pairs (its points are not the reduction's); use SplitCombine::kernel",
        values.reduction.name(), values.reduction.name());
  append_last_block_fold(parts_kernel, values, partials, parts, counters);
  const Monoid &m = *values.reduction.definition().reduction->monoid;
  const int chains = std::min(parts, kMaxChains);
  parts_kernel.schedule_summary += fmt::format(
      "  the last of a tile's {} part blocks to arrive (a ticket from its counter after a __threadfence) "
      "folds the tile's partial states with {}'s combine, in {} chains of up to {} consecutive parts\n",
      parts, m.name, chains, (parts + chains - 1) / chains);
  if (parts_kernel.fallback) {
    Kernel fallback = *parts_kernel.fallback;
    append_last_block_fold(fallback, values, partials, parts, counters);
    parts_kernel.fallback = std::make_shared<const Kernel>(std::move(fallback));
  }
}

}  // namespace twist
