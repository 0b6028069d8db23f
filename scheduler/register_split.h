#pragma once
// The register split of a warp-specialized block (FuncSchedule::warp_specialize), checked the same way for
// every kernel that has one (the GEMM's main loop, the chained reduction).
#include <string>

#include "scheduler/schedule.h"
#include "scheduler/target.h"

namespace twist {

// A block starts with the registers its launch bounds give each thread (`threads` a block, `blocks_per_sm`
// blocks an SM); setmaxnreg.dec must go below that and setmaxnreg.inc above it, and setmaxnreg only moves the
// block's own registers between its warpgroups: what the producer gives back is all the consumers can take
// (asking for more waits forever). Refuses a split outside those bounds, naming demand and budget.
void check_register_split(const std::string &func, const WarpSpecialization &split, int threads,
                          int consumer_threads, int blocks_per_sm, const Target &target);

}  // namespace twist
