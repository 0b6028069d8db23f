#pragma once
// The reference backend's loop-nest interpreter: runs lowered kernels (scheduler/loop_nest.h) on the CPU as
// a GPU would, block after block, the threads of a block in lockstep with an active mask, so that tiling,
// staging, pipelining, fragment layouts, tails and accumulation precision are tested without a GPU.
//
// What it checks as it runs (each failure is a twist::Error naming the kernel, block, thread and statement):
// out-of-bounds accesses to any memory, loads and stores of the wrong type, barriers and warp-collective
// instructions under divergent branches, loop bounds that differ between threads, misaligned copies, and
// (with InterpretOptions::check_races) shared-memory races: accesses to elements that a cp.async in flight
// will write, and conflicting accesses by two threads with no barrier between them. Shared memory and
// registers start as poison (NaN for floating-point types), as a GPU does not clear them.
#include <map>
#include <string>

#include "backends/reference/host_tensor.h"
#include "backends/reference/interpreter/interpret_options.h"
#include "scheduler/loop_nest.h"

namespace twist::reference {

// Runs every block of the kernel's grid. `buffers` holds the kernel's global tensors by name, with the type
// and shape its BufferArgs declare: inputs are read, outputs and workspaces written (in place, when the
// kernel completes). `scalars` holds the scalar arguments (size parameters and Params) by name. A kernel
// whose requirements (Kernel::requirements) do not hold for them is refused, as the GPU runtime refuses it.
void run_kernel(const Kernel &kernel, std::map<std::string, HostTensor> &buffers,
                const std::map<std::string, double> &scalars, const InterpretOptions &options = {});

// Runs a lowered program's kernels in order, each as the variant the GPU runtime would launch for these
// shapes (select_variant in scheduler/arguments.h). Size parameters are bound from the inputs' shapes
// (bind_arguments), so `scalars` needs only the others. Outputs and workspaces are allocated from their
// shapes and poisoned first (NaN, or the largest value of an integer type), so that an element no kernel
// writes cannot pass a comparison; returns the outputs by name.
std::map<std::string, HostTensor> run_program(const LoweredProgram &program,
                                              const std::map<std::string, HostTensor> &inputs,
                                              const std::map<std::string, double> &scalars,
                                              const InterpretOptions &options = {});

}  // namespace twist::reference
