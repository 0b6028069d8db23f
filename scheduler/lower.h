#pragma once
// Lowering a program (its output func and everything it depends on) under a schedule to kernels.
#include "lang/func.h"
#include "scheduler/loop_nest.h"
#include "scheduler/schedule.h"
#include "scheduler/target.h"

namespace twist {

// The output's extents come from Func::set_shape. Every reordering or split of a reduction is checked with
// the algebra's associativity checker first; a refusal throws twist::Error with its counterexample.
LoweredProgram lower(const Func &output, const Schedule &schedule, const Target &target);

}  // namespace twist
