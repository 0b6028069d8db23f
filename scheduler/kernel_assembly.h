#pragma once
// The last step of every kernel builder: the body wrapped in its shared arrays and the definitions of its
// bound loops, and the kernel's launch shape, budgets, requirements and expected instructions filled in.
#include <string>
#include <vector>

#include "scheduler/reduction_kernel.h"
#include "scheduler/staging.h"
#include "scheduler/thread_mapping.h"

namespace twist {

// `body` with the values that no loop changes (a block's coordinates, the guards on them, divisions by the
// shape's scalars) computed once, before the loops: the CUDA compiler does not lift them out of unrolled
// copies or out of the branches around short-circuit guards on its own.
Halide::Internal::Stmt hoist_invariants(const Halide::Internal::Stmt &body);

// `body` holds the shared arrays of `stages` (with_shared_arrays); `instructions` are the ones the body's
// atoms and shuffles ask for (the stages add their copies'). Throws, naming every shared array's share, when
// the shared arrays exceed the target's budget.
Kernel assemble_kernel(const ReductionKernelRequest &request, Halide::Internal::Stmt body,
                       const std::vector<StagePlan> &stages, const ThreadMapping &mapping,
                       std::vector<std::string> instructions, const std::string &summary);

// build(request), and when the kernel it gives has requirements (aligned rows for vector copies, a positive
// scale), the same built again as its fallback (ReductionKernelRequest::fallback) for arguments that break
// them.
template <typename Request, typename Build>
Kernel with_fallback(const Request &request, ReductionKernelRequest &(*of)(Request &), Build build) {
  Kernel k = build(request);
  Request narrow = request;
  ReductionKernelRequest &r = of(narrow);
  if (!k.requirements.empty() && !r.fallback) {
    r.fallback = true;
    r.kernel_name += "_fallback";
    k.fallback = std::make_shared<const Kernel>(build(narrow));
  }
  return k;
}

}  // namespace twist
