#pragma once
// The combine of a split reduction (FuncSchedule::split_reduction): the parts' partial states folded with
// the monoid's combine, then finalized (or handed to the fused epilogue) and stored. One fold serves both
// places it runs:
//   - SplitCombine::kernel: a second kernel, one thread per output point;
//   - SplitCombine::last_block: inside the parts kernel. Each block stores its part's states, fences them
//     (__threadfence) and takes a ticket from its output tile's arrival counter; the block that arrives
//     last (ticket parts - 1) folds every part of the tile and resets the counter for the next launch. The
//     counters are a zeroed workspace (Workspace::zeroed): the runtime zeroes them once, the kernel leaves
//     them zeroed, so that no launch or user code clears them.
#include <vector>

#include "scheduler/loop_nest.h"
#include "scheduler/reduction_kernel.h"

namespace twist {

// The chains a point's fold runs side by side (independent loads in flight per state component): a fold of
// `parts` waits for memory ceil(parts / kSplitCombineChains) times, which a tiling rule can weigh.
inline constexpr int kSplitCombineChains = 16;

// The statements folding the `parts` partial states of the output point at `coords` and storing the result
// as `values` stores it (its epilogue). `coords` is the reduction's point, or the point of a consumer reading
// it at column pairs (ReductionKernelRequest::paired_dim), which folds both points of its pair. The states
// are read from `partials`, one buffer per state component, shaped [parts, extents...]. The parts go into up
// to kSplitCombineChains chains of consecutive parts, combined pairwise in order afterwards (see
// split_combine.cpp).
Halide::Internal::Stmt fold_parts(const ReductionKernelRequest &values,
                                  const std::vector<BufferArg> &partials, int parts,
                                  const std::vector<Halide::Expr> &coords);

// The second kernel of SplitCombine::kernel: fold_parts for every output point, one thread each. Its
// buffers are left for collect_arguments.
Kernel combine_kernel(const ReductionKernelRequest &values, const std::vector<BufferArg> &partials,
                      int parts);

// SplitCombine::last_block: appends to `parts_kernel` (which stores the partial states of part blockIdx.z
// of its tile, as ReductionKernelRequest::Output::partial_states asks) the fence, the ticket at
// `counters[tile]` and the last block's fold of its tile's points (the loops of values.reduction under its
// schedule that no block index covers), the same to its fallback. `counters` is an i32 zeroed workspace of
// counter_count(parts_kernel) elements. The kernel's buffers are collected again.
void combine_in_last_block(Kernel &parts_kernel, const ReductionKernelRequest &values,
                           const std::vector<BufferArg> &partials, int parts, const BufferArg &counters);
// The arrival counters a parts kernel needs: one per output tile, blocks along x and y.
Halide::Expr counter_count(const Kernel &parts_kernel);

}  // namespace twist
