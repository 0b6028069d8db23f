#pragma once
// Builds the kernel that computes a reduction func under its schedule: blocks and threads take output
// points, each thread keeps the states of its points in registers, the reduction loops fold elements into
// them (one combine per element, or a matrix atom per 16 x 8 x 16 tile of a contraction), staged inputs flow
// through shared memory with the schedule's transport, and the epilogue finalizes and stores.
#include <optional>
#include <string>
#include <vector>

#include "lang/graph.h"
#include "scheduler/loop_nest.h"
#include "scheduler/schedule.h"
#include "scheduler/target.h"

namespace twist {

struct ReductionKernelRequest {
  const FuncGraph *graph = nullptr;
  Func reduction;
  // A pure func that reads the reduction pointwise: the kernel stores its values instead (a fused epilogue).
  std::optional<Func> consumer;
  // The consumer's dimension in which it reads the reduction at column pairs (2x, 2x + 1): each of its points
  // is computed from two of the reduction's (extents are the reduction's, twice the consumer's there). -1:
  // it reads the reduction at its own point.
  int paired_dim = -1;
  // The consumer's dimension over which reductions computed at it fold the reduction's rows (row folds,
  // scheduler/realization.h) and along which it reads the reduction rotated; -1 where it has none.
  int fold_dim = -1;
  std::vector<Func> row_folds;        // those reductions, computed in the epilogue
  std::vector<Halide::Expr> extents;  // of the pure domain
  const FuncSchedule *schedule = nullptr;
  Target target;
  std::string kernel_name;
  // What the epilogue writes.
  enum class Output {
    values,          // the finalized values (or the consumer's), one output buffer each
    partial_states,  // the raw state components of part blockIdx.z, one workspace buffer each
    atomic_sum,      // the state, added atomically into the output buffer (split sums)
  } output = Output::values;
  std::vector<BufferArg> output_buffers;  // outputs (values, atomic_sum) or workspaces (partial_states)
  std::vector<BufferArg> intermediates;   // the buffers of earlier stages, read where their funcs are called
  // Lowered as the fallback kernel (Kernel::fallback), which runs when the scalar arguments break a
  // requirement of the main one: it requires nothing of them, so its stage copies move one element each (no
  // alignment; see plan_stage) and it assumes nothing of the parameters' values.
  bool fallback = false;
};

Kernel build_reduction_kernel(const ReductionKernelRequest &request);

// The buffer and scalar arguments a kernel body reads and writes, in a stable order: the inputs and the
// `intermediates` (earlier stages' buffers) it loads, then `outputs`.
void collect_arguments(const FuncGraph &graph, Kernel &k, const std::vector<BufferArg> &outputs,
                       const std::vector<BufferArg> &intermediates = {});

}  // namespace twist
