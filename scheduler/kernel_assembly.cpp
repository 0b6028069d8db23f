#include "scheduler/kernel_assembly.h"

#include "lang/error.h"
#include "scheduler/address_bases.h"
#include "scheduler/stmt_building.h"

namespace twist {

using namespace Halide::Internal;

namespace {

// Halide's loop-invariant code motion leaves a statement's common subexpressions as Let expressions around
// its call; intrinsics are recognized as Evaluate(Call), so the Lets become LetStmts around the statement.
class LetsAroundEvaluate : public IRMutator {
  using IRMutator::visit;
  Stmt visit(const Evaluate *op) override {
    std::vector<std::pair<std::string, Halide::Expr>> lets;
    Halide::Expr value = op->value;
    while (const auto *l = value.as<Let>()) {
      lets.push_back({l->name, l->value});
      value = l->body;
    }
    return stmt::let_all(lets, Evaluate::make(value));
  }
};

}  // namespace

Stmt hoist_invariants(const Stmt &body) {
  return LetsAroundEvaluate().mutate(hoist_loop_invariant_values(body));
}

Kernel assemble_kernel(const ReductionKernelRequest &request, Stmt body, const std::vector<StagePlan> &stages,
                       const ThreadMapping &mapping, std::vector<std::string> instructions,
                       const std::string &summary) {
  Kernel k;
  for (const StagePlan &p : stages) {
    k.requirements.insert(k.requirements.end(), p.requirements.begin(), p.requirements.end());
    if (p.directive.transport == Transport::cp_async && p.copy_bytes >= 4) {
      // (a named pointer, not a conditional inside push_back: GCC 12 reports a false -Warray-bounds there)
      const char *copy = p.copy_bytes == 16 ? "cp.async.cg.shared.global" : "cp.async.ca.shared.global";
      k.required_instructions.emplace_back(copy);
    }
  }
  const SharedArrays shared = shared_arrays(body);
  k.shared_bytes = shared.bytes;
  if (k.shared_bytes > request.target.max_shared_bytes_per_block) {
    std::string demand;
    for (const SharedArray &a : shared.arrays) {
      std::string slots;
      for (const StagePlan &p : stages)
        if (p.buffer == a.allocate->name && p.directive.depth > 1)
          slots = fmt::format(" ({} slots of {} B)", p.directive.depth, p.slot_elems * p.elem_bytes);
      demand += fmt::format("{}{} {} B{} at offset {}", demand.empty() ? "" : ", ", a.allocate->name, a.bytes,
                            slots, a.offset);
    }
    fail(
        "schedule of '{}' needs {} bytes of shared memory per block ({}), but {} allows {} bytes; use fewer "
        "pipeline stages or smaller tiles",
        request.reduction.name(), k.shared_bytes, demand, request.target.arch,
        request.target.max_shared_bytes_per_block);
  }
  k.name = request.kernel_name;
  k.grid = mapping.grid;
  k.threads = mapping.threads;
  k.min_blocks_per_sm = request.schedule ? request.schedule->min_blocks() : 1;
  k.fast_math = request.schedule && request.schedule->approximate();
  k.body = hoist_invariants(
      simplify_exprs(share_address_bases(define_bound_loops(mapping, body), mapping.threads)));
  k.required_instructions.insert(k.required_instructions.end(), instructions.begin(), instructions.end());
  k.schedule_summary = summary;
  for (const StagePlan &p : stages)
    if (p.directive.transport == Transport::tma) k.tensor_maps.push_back(p.tensor_map());
  collect_arguments(*request.graph, k, request.output_buffers, request.intermediates);
  return k;
}

}  // namespace twist
