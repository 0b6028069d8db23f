#pragma once
// What a reduction kernel does with the state of one output point at the end: finalize it (or hand it to
// the fused consumer) and store, store the raw state as a partial, or add it atomically.
#include <vector>

#include "scheduler/reduction_kernel.h"

namespace twist {

// Statements storing the point at `coords` (the output's coordinates, in kernel terms) whose state
// components are `state`; `part` is the split part's index where the request stores partial states.
Halide::Internal::Stmt epilogue_stores(const ReductionKernelRequest &request,
                                       const std::vector<Halide::Expr> &coords,
                                       const std::vector<Halide::Expr> &state, const Halide::Expr &part);

}  // namespace twist
