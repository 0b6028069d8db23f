#pragma once
// The first pass of lower(): where each func of a program is computed (DESIGN.md, "Lowering a pipeline"), and
// the extents of the funcs computed into buffers of their own.
//
// The rule, for funcs the schedule does not place:
//   - a pure func is inlined into its consumers;
//   - a reduction read by the program's pure output at that output's own points (a GEMM's bias epilogue) is
//     computed by its own schedule, with the output as its fused epilogue; so is a reduction with a matrix
//     atom that the output reads at column pairs, (.., 2x, ..) and (.., 2x + 1, ..) at its own point x (a
//     gated activation over interleaved gate and up columns), whose extent in that dimension is then twice
//     the output's (the atom's layouts keep both columns of a pair in one thread: scheduler/epilogue.h);
//   - so is a reduction with a matrix atom that the output reads at its own point and at its own point
//     rotated along the atom's columns, ((x + c) % E in that dimension of extent E), beside reductions
//     computed at the output that fold it over that whole dimension at the output's other coordinates (a
//     per-head RMSNorm with RoPE over a projection whose columns are a head): "row folds", computed in the
//     epilogue where one thread quad holds a whole row of the atom's columns (scheduler/epilogue.h);
//   - any other reduction read by exactly one pure func is computed at that consumer's row: the consumer's
//     loops that the reduction's coordinates depend on, one block per row, folded by the block's threads as
//     a tree (long reductions get a cooperative tree per output point);
//   - a reduction read from several funcs, or by another reduction, is a stage of its own (compute_root).
// A reduction stage with no schedule is folded by a cooperative tree per output point
// (scheduler/row_kernel.h), except an output that is an f16 or bf16 contraction, which
// scheduler/default_schedule.h gives the tensor-core schedule first. A pure stage is one block per row when
// reductions are computed at it, and elementwise otherwise. The output is always a stage. A stage's extents
// are the output's shape (Func::set_shape) or, for the other stages, the bounds of what their consumers read
// (bounds inference over the consumers' footprints).
#include <string>
#include <vector>

#include "lang/graph.h"
#include "scheduler/schedule.h"

namespace twist {

enum class Placement {
  inlined,      // substituted into every consumer's expressions
  at_consumer,  // computed inside the consumer's kernel, once per iteration of one of its loops
  epilogue,     // a reduction computed by its own schedule, its consumer (the output) stored by its epilogue
  root,         // a stage of its own, its values in a workspace buffer
  output,       // the program's output
};
const char *to_string(Placement p);

struct FuncRealization {
  Func func;
  Placement placement = Placement::inlined;
  std::string consumer, loop;         // at_consumer: where (an empty loop: the row); epilogue: the output
  std::vector<Halide::Expr> extents;  // root, epilogue and output: the extents it is computed over
  // epilogue: the dimension in which the consumer reads it at column pairs (2x, 2x + 1), or -1 where the
  // consumer reads it at its own point.
  int paired_dim = -1;
  // epilogue: the dimension over which the consumer's row folds fold the reduction (and along which it reads
  // it rotated), or -1.
  int fold_dim = -1;
  bool by_default = false;  // placed by the rule above, not by the schedule
};

struct Realization {
  std::vector<FuncRealization> funcs;  // producers before consumers, the output last
  const FuncRealization &of(const std::string &func) const;
  // The funcs computed at `consumer`'s loops, producers first.
  std::vector<const FuncRealization *> computed_at(const std::string &consumer) const;
  std::string to_string() const;  // one line per func, for --dump=realization
};

// Places every func of `graph` (whose last func is the output) and infers the extents of the stages. Throws,
// naming the func, when a schedule places a func where it cannot be computed: compute_at a func that does not
// read it or a loop the consumer does not have, or compute_root of a func of several values.
Realization plan_realization(const FuncGraph &graph, const Schedule &schedule);

// The loop names of `f` under its schedule (null: its own variables and RVars), outermost first.
std::vector<std::string> loop_names(const Func &f, const FuncSchedule *schedule);

// `e` with every call of an inlined func replaced by its value, so that the calls left are of inputs and of
// funcs computed elsewhere.
Halide::Expr inline_calls(const FuncGraph &graph, const Realization &realization, const Halide::Expr &e);

}  // namespace twist
