#pragma once
// What a reduction kernel does with the state of one output point at the end: finalize it (or hand it to
// the fused consumer) and store, store the raw state as a partial, or add it atomically.
#include <vector>

#include "scheduler/expr_lowering.h"
#include "scheduler/intrinsics.h"
#include "scheduler/reduction_kernel.h"
#include "scheduler/staging.h"

namespace twist {

// Statements storing the point at `coords` (the reduction's coordinates, in kernel terms) whose state
// components are `state`; `part` is the split part's index where the request stores partial states. Where
// the fused consumer reads column pairs (ReductionKernelRequest::paired_dim), `coords` is the pair's first
// point (even in that dimension), `pair_state` the state of the second, and the consumer's point they make
// is stored. `other_reads` resolves the consumer's calls first, where it gives a value: those of its row
// folds and of the reduction at other points of the thread's registers (ReductionKernelRequest::fold_dim).
Halide::Internal::Stmt epilogue_stores(const ReductionKernelRequest &request,
                                       const std::vector<Halide::Expr> &coords,
                                       const std::vector<Halide::Expr> &state, const Halide::Expr &part,
                                       const std::vector<Halide::Expr> &pair_state = {},
                                       const ExprLowering::FuncCallHook &other_reads = {});

// The point of the stored output that the reduction's point `coords` goes into, and the output's extents:
// the reduction's, halved in the dimension of a consumer's column pairs.
std::vector<Halide::Expr> output_coords(const ReductionKernelRequest &request,
                                        const std::vector<Halide::Expr> &coords);
std::vector<Halide::Expr> output_extents(const ReductionKernelRequest &request);

// The write-back tiles of the request's outputs, over the block's `loops`, with a line each added to
// `summary`: a tensor-core kernel's lanes hold pairs of elements scattered over 8 rows of each atom, which
// stored straight to global memory take one narrow store each; collected in shared memory first, a block's
// tile goes out in wide stores of whole rows. None when the tiles would not fit the target's shared memory.
std::vector<StagePlan> plan_write_backs(const ReductionKernelRequest &request, const LoopStructure &loops,
                                        std::string &summary);

// Whether `s` reads one of the program's inputs (a bias, say): then the epilogue must not compute it at
// points outside the output, even where it only goes into a shared tile.
bool reads_inputs(const Halide::Internal::Stmt &s, const FuncGraph &graph);

// The epilogue through write-back tiles: once every warp is done with the staged inputs (whose bytes the
// tiles reuse), `stores` (the stores of the output point at `coords`, for every point of the block) go into
// the tiles of `write_backs`, and then `threads` threads (the first of the block) copy the tiles out to the
// outputs. `sync` is the barrier among those threads: intrinsic::barrier() where they are the whole block.
// Tiles with Transport::tma are stored by thread 0 with TMA stores, which it waits for (the shared reads
// only) before the tiles are written again; drain_tma_stores must follow the block's last write_back. The
// tiles are those of pipeline slot `slot` of the write-backs (a ping-pong consumer warpgroup's own).
Halide::Internal::Stmt write_back(const std::vector<StagePlan> &write_backs,
                                  const std::vector<Halide::Expr> &coords,
                                  const Halide::Internal::Stmt &stores, int threads,
                                  const Halide::Internal::Stmt &sync = intrinsic::barrier(),
                                  const Halide::Expr &slot = 0);

// Thread 0's wait until the TMA stores of `write_backs` have read their tiles: at the end of a kernel, whose
// shared memory must outlive them. Undefined where no tile is stored by TMA.
Halide::Internal::Stmt drain_tma_stores(const std::vector<StagePlan> &write_backs);

}  // namespace twist
