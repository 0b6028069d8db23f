#pragma once
// The kernels of stages that are not tiled contractions: a pure stage with the reductions computed at its
// rows (softmax, LayerNorm, RMSNorm), a pure stage alone (elementwise), and a reduction stage folded by a
// cooperative tree per output point.
//
// A pure stage F with reductions computed at it: one block per row, the row being F's loops up to the
// innermost one that the reductions' coordinates depend on (or the loop compute_at names). The block folds
// each reduction as a cooperative tree (scheduler/cooperative_tree.h), producers first, and then its threads
// compute the row's points of F, reading the reductions' values from shared memory. The block size T follows
// from the row length: the power of two that gives each thread about four 16-byte vectors of the row,
// between 32 and 1024 (256 when the length is not a constant), unless the schedule binds a reduction loop to
// threads; a row kept in registers may take fewer threads with more runs each, where that keeps more bytes of
// rows resident per SM (docs/pipelines.md, "Threads per row").
//
// Rows in registers, where the row is one dimension of constant length, a whole number of 16-byte runs of
// the output (W points), at most 8 runs per thread, and every tree a default one over a commutative monoid:
// thread t owns the points (s T + t) W + e of the row. Each input read several times along the row is loaded
// once into registers with 16-byte loads, the trees deal their points in the same runs and fold from the
// registers, and each run of every output is computed into registers and stored with 16-byte stores
// (scheduler/vector_accesses.h). Otherwise the row is kept in shared memory: an input read several times in
// the row, along its last dimension, whose row has a constant length and fits in shared memory (with the
// trees' arrays), is copied there once with 16-byte cp.async copies where its rows allow, and point c of the
// row is computed by thread c mod T. Either way the kernel reads such an input from global memory once,
// unless the schedule asks for rows read again (FuncSchedule::row_form(RowForm::reread)): then, in the
// registers layout, no row is kept, and each tree's fold and the epilogue load their runs of it from global
// memory again with 16-byte loads (docs/pipelines.md, "Rows read again"; the rule keeps rows in registers).
#include <string>
#include <vector>

#include "lang/graph.h"
#include "scheduler/loop_nest.h"
#include "scheduler/realization.h"
#include "scheduler/schedule.h"
#include "scheduler/target.h"

namespace twist {

struct StageKernelRequest {
  const FuncGraph *graph = nullptr;
  const Realization *realization = nullptr;
  const Schedule *schedule = nullptr;
  Target target;
  std::string kernel_name;
  Func stage;
  std::vector<Halide::Expr> extents;
  // The stage's values (one buffer each), or for a split reduction's parts its raw state components.
  std::vector<BufferArg> output_buffers;
  bool partial_states = false;
  std::vector<BufferArg> intermediates;  // the buffers of earlier stages, named as their funcs
};

// A pure stage: with the reductions computed at it, one block per row; without, elementwise: each thread two
// runs of a 16-byte vector's worth of points along the innermost dimension, stored and (where an input moves
// with them) read with 16-byte accesses, with a scalar kernel as the fallback where a row length that is not
// a constant is not a whole number of runs (see pointwise_kernel and vector_accesses.h).
Kernel build_row_kernel(const StageKernelRequest &request);

// A reduction stage whose schedule binds reduction loops to threads, or that has no schedule: one block per
// output point (and per part of a split_reduction), folding it as a cooperative tree.
Kernel build_tree_kernel(const StageKernelRequest &request);

}  // namespace twist
