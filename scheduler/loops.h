#pragma once
// The loops of one func after its schedule's splits, fuses and reorders: what each loop iterates over, where
// its iterations go, and what each of the func's own variables is in terms of the loops.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lang/func.h"
#include "scheduler/schedule.h"

namespace twist {

struct LoopDim {
  std::string name;
  Halide::Expr extent;  // number of iterations (i32, over size parameters)
  bool reduction = false;
  Binding binding = Binding::serial;
  Halide::Expr var() const;
  // The constant extent, or an error naming the loop and `why` a constant is needed.
  int constant_extent(const std::string &func, const char *why) const;
};

struct LoopStructure {
  std::string func;
  std::vector<LoopDim> dims;  // outermost first
  // Each of the func's pure variables and RVars as an expression of the loop variables.
  std::map<std::string, Halide::Expr> value_of;
  // The same without the clamps of splits wider than their loop (see apply_split): what the guards test,
  // so that a repeated point is not stored twice.
  std::map<std::string, Halide::Expr> unclamped_value_of;
  // Conditions that hold exactly at the points of the func's domain (splits that do not divide leave tails).
  std::vector<Halide::Expr> pure_guards;
  // Conditions that hold exactly at the points of the reduction domain, its predicates included.
  std::vector<Halide::Expr> reduction_guards;
  // The pure guards that fail at the points a split wider than its loop repeats (see apply_split), also in
  // pure_guards. The output's own bounds do not exclude those points where the split loop was fused out of
  // others (16 rows of an atom over 4 heads of a group are also rows of the next group's heads): stored,
  // they would land twice on one element.
  std::vector<Halide::Expr> repeat_guards;

  const LoopDim &dim(const std::string &name) const;  // throws naming the loops there are
  int index(const std::string &name) const;           // -1 if absent
  std::string names() const;
};

// The loops of `f` under `schedule` (which may be null: the func's own loops, pure variables outermost in
// argument order, then its RVars with r.x innermost). `extents` are the extents of f's pure variables.
LoopStructure make_loops(const Func &f, const std::vector<Halide::Expr> &extents,
                         const FuncSchedule *schedule);

// Substitutes the loop expressions of `loops` for the func's variables in e.
Halide::Expr in_loop_terms(const LoopStructure &loops, const Halide::Expr &e);

}  // namespace twist

namespace twist {

// Splits loop `name` into `parts` blocks' worth of iterations: a new loop `part_name` of extent `parts`
// outside it, bound to `binding`, and the loop itself shortened to ceil(extent / parts). The guards and
// variable values follow.
void split_into_parts(LoopStructure &loops, const std::string &name, const std::string &part_name, int parts,
                      Binding binding);

}  // namespace twist
