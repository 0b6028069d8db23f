#pragma once
// The last pass of lower(): the kernels of one stage (the output, or a func computed with compute_root), in
// the order they launch. A tiled reduction (its schedule binds no reduction loop to threads) keeps its
// builders: scheduler/reduction_kernel.h, with its pure consumer as the fused epilogue, or
// scheduler/chained_kernel.h when its elements read a reduction computed at its tile; split_reduction adds a
// kernel that combines the parts. A reduction with no schedule, or whose schedule binds a reduction loop to
// threads, is a cooperative tree per output point (scheduler/row_kernel.h), also split by split_reduction;
// a pure stage is a row kernel with the reductions computed at its rows, or elementwise.
#include <string>
#include <vector>

#include "lang/graph.h"
#include "scheduler/loop_nest.h"
#include "scheduler/realization.h"
#include "scheduler/schedule.h"
#include "scheduler/target.h"

namespace twist {

struct StageContext {
  const FuncGraph *graph = nullptr;
  const Realization *realization = nullptr;
  const Schedule *schedule = nullptr;
  Target target;
  std::vector<BufferArg> intermediates;  // the buffers of the stages before this one, named as their funcs
};

// Appends the stage's kernels to program.kernels (and a split's partial states to program.workspaces).
// `buffers` are where the stage's values go, one per value. Every reassociation of a reduction (a tree, a
// reorder, a matrix atom, a split) is approved by the algebra's associativity checker first.
void lower_stage(const StageContext &ctx, const FuncRealization &stage, const std::vector<BufferArg> &buffers,
                 const std::string &kernel_name, LoweredProgram &program);

}  // namespace twist
