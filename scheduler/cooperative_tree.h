#pragma once
// A reduction folded by the threads of one block together (a cooperative tree): each thread folds its own
// points sequentially into registers, each warp combines its lanes' states with shuffles (one per state
// component, so any monoid), and the warps' states meet in shared memory, every step with the monoid's
// combine in the order of the points (a lane whose bit is set is the right operand). Allowed only after the
// associativity checker approved reassociating the monoid (lower() asks before it builds any tree).
//
// The schedule names the tree by binding reduction loops: one to threads (its extent a multiple of 32, the
// block's threads; or 32, the lanes, when another is bound to warps) and optionally one to warps. Without
// such a binding the tree is the default one: the reduction's RVars fused into one loop whose iterations are
// dealt to the block's threads in turn (thread t folds points t, t + T, t + 2T, ...: coalesced reads).
#include <functional>
#include <string>
#include <vector>

#include "lang/func.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/loops.h"
#include "scheduler/target.h"

namespace twist {

struct CooperativeTree {
  Func reduction;
  LoopStructure loops;  // the reduction's loops; its pure loops are not iterated (the point is given)
  int threads = 0;      // the block's threads, all of which take part
  std::string lane_loop, warp_loop;  // the reduction loops bound to threads and to warps ("" where none)
  std::string part_loop;  // the loop of a split_reduction's parts, defined by the kernel ("" where none)
  // A default tree dealing runs of consecutive points: point (run * threads + lane) * width + vector, over
  // the unrolled loops `run_loop` and `vector_loop` ("" where the points are dealt one by one).
  std::string run_loop, vector_loop;
  std::string summary;
};

// Whether `schedule` binds one of its func's reduction loops to threads or warps (asks for a tree).
bool binds_reduction_to_threads(const Func &f, const FuncSchedule *schedule);

// The tree of `reduction` under `schedule` (which may be null): `default_threads` is the block size when the
// schedule binds no reduction loop to threads. A split_reduction in the schedule becomes the loop
// `part_loop`, one part per block, which the kernel defines. With `run_width` > 1 a default tree over a
// commutative monoid deals its points in runs of that many consecutive points (the layout of a row kept in
// registers by 16-byte loads, see row_kernel.h).
CooperativeTree plan_tree(const Func &reduction, const FuncSchedule *schedule, int default_threads,
                          int run_width = 1);

// Folds the tree's reduction at the point where `lowering` binds its pure variables, then runs `then`, in
// which the combined state is in the shared arrays that tree_state() reads (every thread sees it).
// `lowering` resolves the elements' calls (inputs, buffers of earlier stages, other reductions). Where the
// tree deals runs, `around_run` (if given) wraps the fold of each run (the unrolled loop over its points):
// the row kernel loads a run of a row it reads again with 16-byte copies there.
Halide::Internal::Stmt tree_fold(
    const CooperativeTree &tree, ExprLowering lowering, const Halide::Internal::Stmt &then,
    const std::function<Halide::Internal::Stmt(const Halide::Internal::Stmt &)> &around_run = nullptr);

// The combined state components, as loads every thread may make inside tree_fold's `then`.
std::vector<Halide::Expr> tree_state(const CooperativeTree &tree);
// The reduction's finalized values over that state.
std::vector<Halide::Expr> tree_values(const CooperativeTree &tree);

}  // namespace twist
