#pragma once
// The first pass of lower(): the schedule the program's own is completed with. A program's output that the
// schedule leaves out and that is a contraction of two f16 or bf16 inputs into an f32 sum,
// C(i, j) = sum over k of A(i, k) * B(k, j), gets the tensor-core schedule: blocks of 128 x 128 outputs,
// warps of 64 x 64, k-tiles of 32 staged in shared memory by 3-stage cp.async, mma.m16n8k16 atoms
// accumulating in f32. Every other func left out is placed by the rule of scheduler/realization.h.
#include "lang/graph.h"
#include "scheduler/schedule.h"

namespace twist {

Schedule with_default_schedules(const FuncGraph &graph, const Schedule &schedule);

}  // namespace twist
