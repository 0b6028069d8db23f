#include "scheduler/stage_lowering.h"

#include "algebra/legality.h"
#include "lang/error.h"
#include "scheduler/chained_kernel.h"
#include "scheduler/cooperative_tree.h"
#include "scheduler/epilogue.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/loops.h"
#include "scheduler/pointwise_kernel.h"
#include "scheduler/reduction_kernel.h"
#include "scheduler/row_kernel.h"
#include "scheduler/split_combine.h"
#include "scheduler/stmt_building.h"

namespace twist {

using namespace Halide::Internal;

namespace {

// The reduction funcs that an expression calls (pure funcs are looked through: they will be inlined).
void reductions_called(const FuncGraph &g, const Halide::Expr &e, std::vector<std::string> &out) {
  struct Calls : IRVisitor {
    std::vector<std::string> names;
    using IRVisitor::visit;
    void visit(const Call *c) override {
      IRVisitor::visit(c);
      if (c->call_type == Call::Halide) names.push_back(c->name);
    }
  } calls;
  e.accept(&calls);
  for (const std::string &n : calls.names) {
    const Func &f = g.func(n);
    if (f.definition().is_reduction()) {
      if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    } else {
      for (const Expr &v : f.definition().values) reductions_called(g, v, out);
    }
  }
}

// The checker folds states as long as the ones this schedule builds: its constant reduction loops (tiles)
// and its split parts.
algebra::CheckOptions schedule_check_options(const Func &reduction, const std::vector<Halide::Expr> &extents,
                                             const FuncSchedule *fs) {
  algebra::CheckOptions options;
  // Only the reduction loops are read, so a func computed at its consumer (no extents of its own) takes 1s.
  std::vector<Halide::Expr> points = extents;
  points.resize(reduction.dimensions(), Halide::Expr(1));
  for (const LoopDim &d : make_loops(reduction, points, fs).dims)
    if (const int64_t *n = Halide::Internal::as_const_int(d.extent); n && d.reduction)
      options.fold_lengths.push_back(static_cast<int>(*n));
  if (fs && fs->reduction_split()) options.fold_lengths.push_back(fs->reduction_split()->parts);
  return options;
}

// A reorder of the reduction loops of `f` permutes its points, which needs commutativity besides
// associativity: the primitive, named for require_reorderable with the loops before and after, or none when
// the schedule keeps the order its splits give.
std::optional<std::string> reduction_reorder(const Func &f, const std::vector<Halide::Expr> &extents,
                                             const FuncSchedule *fs) {
  if (!fs) return std::nullopt;
  std::vector<Halide::Expr> points = extents;
  points.resize(f.dimensions(), Halide::Expr(1));
  auto order = [&](const FuncSchedule &s) {
    std::vector<std::string> names;
    for (const LoopDim &d : make_loops(f, points, &s).dims)
      if (d.reduction) names.push_back(d.name);
    return names;
  };
  const std::vector<std::string> after = order(*fs), before = order(fs->without_reorders());
  if (after == before) return std::nullopt;
  return fmt::format("reorder of the reduction loops of {} (from {} to {}, outermost first)", f.name(),
                     fmt::join(before, ", "), fmt::join(after, ", "));
}

// The approval of the associativity checker for a cooperative tree of `f` (over the points `extents`), as
// lines of the kernel's summary.
std::string approve_tree(const Func &f, const std::vector<Halide::Expr> &extents, const Schedule &schedule) {
  const FuncSchedule *fs = schedule.find(f.name());
  std::optional<algebra::AssociativityOverride> user_override;
  if (fs && fs->associativity_override())
    user_override = algebra::AssociativityOverride{*fs->associativity_override()};
  const Monoid &monoid = *f.definition().reduction->monoid;
  const algebra::CheckOptions options = schedule_check_options(f, extents, fs);
  std::string reordered;
  if (const auto reorder = reduction_reorder(f, extents, fs))
    reordered =
        "  " + algebra::require_reorderable(monoid, *reorder, user_override, options).to_string() + "\n";
  // A monoid said to commute (Monoid::commutative) gets trees that fold its points out of order, so the
  // claim is checked, not trusted.
  if (monoid.commutative)
    return reordered + "  " +
           algebra::require_reorderable(
               monoid,
               fmt::format("cooperative tree of {} across the threads of a block, its points in any order "
                           "(the monoid is declared commutative)",
                           f.name()),
               user_override, options)
               .to_string() +
           "\n";
  const std::string what = fmt::format("cooperative tree of {} across the threads of a block", f.name());
  return reordered + "  " + algebra::require_reassociable(monoid, what, user_override, options).to_string() +
         "\n";
}

void tiled_reduction_stage(const StageContext &ctx, const FuncRealization &stage, const Func &reduced,
                           const std::vector<BufferArg> &buffers, const std::string &kernel_name,
                           LoweredProgram &program) {
  std::vector<Kernel> kernels;
  const FuncGraph &graph = *ctx.graph;
  const Schedule &schedule = *ctx.schedule;
  const Func &output = stage.func;
  ReductionKernelRequest request;
  request.graph = &graph;
  // A fused consumer of column pairs covers half the reduction's points in that dimension.
  const FuncRealization &computed = output.same_as(reduced) ? stage : ctx.realization->of(reduced.name());
  const std::vector<Halide::Expr> &extents = computed.extents;
  request.extents = extents;
  request.paired_dim = computed.paired_dim;
  request.fold_dim = computed.fold_dim;
  if (computed.fold_dim >= 0)
    for (const FuncRealization *r : ctx.realization->computed_at(output.name()))
      request.row_folds.push_back(r->func);
  request.target = ctx.target;
  request.intermediates = ctx.intermediates;
  request.reduction = reduced;
  if (!output.same_as(reduced)) request.consumer = output;
  const std::string &reduction = request.reduction.name();
  request.schedule = schedule.find(reduction);
  if (!request.schedule)
    fail(
        "the program's reduction '{}' has no schedule: schedule it (tile and bind its loops) with "
        "schedule[{}]",
        reduction, reduction);
  const Monoid &monoid = *request.reduction.definition().reduction->monoid;
  request.output_buffers = buffers;

  // Every primitive that reassociates the reduction asks the algebra first.
  std::string approvals;
  std::optional<algebra::AssociativityOverride> user_override;
  if (request.schedule->associativity_override())
    user_override = algebra::AssociativityOverride{*request.schedule->associativity_override()};
  const algebra::CheckOptions check_options =
      schedule_check_options(request.reduction, extents, request.schedule);
  auto approve = [&](const std::string &what) {
    approvals +=
        "  " + algebra::require_reassociable(monoid, what, user_override, check_options).to_string() + "\n";
  };
  if (const auto reorder = reduction_reorder(request.reduction, extents, request.schedule))
    approvals += "  " +
                 algebra::require_reorderable(monoid, *reorder, user_override, check_options).to_string() +
                 "\n";
  if (request.schedule->atom())
    approve(fmt::format("matrix_atom of {} over {}", reduction, request.schedule->atom()->k));
  if (request.schedule->stream_k_enabled())
    approve(
        fmt::format("stream_k of {}: the last tiles' k-tiles split in ranges across the blocks", reduction));
  // A row fold needs the whole sums of its row in the registers of one tile's epilogue.
  if (request.fold_dim >= 0 && (request.schedule->reduction_split() || request.schedule->stream_k_enabled()))
    fail(
        "func '{}' folds '{}' over its dimension {} in the epilogue, which needs each tile's whole sums, but "
        "the schedule of '{}' splits its reduction ({}); schedule it without the split, or compute '{}' as a "
        "stage of its own (FuncSchedule::compute_root)",
        output.name(), reduction, request.fold_dim, reduction,
        request.schedule->reduction_split() ? "split_reduction" : "stream_k", reduction);
  // A row fold folds a row's columns in each lane, then across its quad: in any order.
  for (const Func &fold : request.row_folds) {
    const FuncSchedule *fs = schedule.find(fold.name());
    std::optional<algebra::AssociativityOverride> fold_override;
    if (fs && fs->associativity_override())
      fold_override = algebra::AssociativityOverride{*fs->associativity_override()};
    approvals += "  " +
                 algebra::require_reorderable(
                     *fold.definition().reduction->monoid,
                     fmt::format("row fold of {} in the epilogue of {}: each lane's columns, then its quad's "
                                 "lanes by shuffles, its points in any order",
                                 fold.name(), reduction),
                     fold_override, schedule_check_options(fold, {}, fs))
                     .to_string() +
                 "\n";
  }
  if (request.schedule->reduction_split())
    approve(fmt::format("split_reduction of {} over {} into {} parts", reduction,
                        request.schedule->reduction_split()->var,
                        request.schedule->reduction_split()->parts));

  // A reduction whose elements read another reduction computed at its tile is one chained kernel.
  std::vector<std::string> producers;
  for (const Expr &e : request.reduction.definition().reduction->elements)
    reductions_called(graph, e, producers);
  std::optional<ChainedKernelRequest> chained;
  if (!producers.empty()) {
    const FuncSchedule *ps = schedule.find(producers[0]);
    if (producers.size() != 1 || !ps || !ps->compute_at() || ps->compute_at()->consumer != reduction)
      fail(
          "func '{}' reads the reduction '{}' in its elements; schedule that reduction compute_at({}, <key "
          "tile loop>) so that it is computed tile by tile inside '{}'",
          reduction, producers[0], reduction, reduction);
    chained = ChainedKernelRequest{request, graph.func(producers[0]), ps};
  }
  auto build = [&](const ReductionKernelRequest &r) {
    if (!chained) return build_reduction_kernel(r);
    ChainedKernelRequest c = *chained;
    c.consumer = r;
    return build_chained_kernel(c);
  };

  request.kernel_name = kernel_name;
  const auto &split = request.schedule->reduction_split();
  if (!split) {
    kernels.push_back(build(request));
  } else if (split->combine != SplitCombine::atomic) {
    std::vector<BufferArg> partials;
    std::vector<Halide::Expr> shape = {Halide::Expr(split->parts)};
    shape.insert(shape.end(), extents.begin(), extents.end());
    for (const Component &c : monoid.state) {
      partials.push_back({reduction + ".partial." + c.name, c.type, shape, BufferArg::Role::workspace});
      program.workspaces.push_back({partials.back().name, c.type, shape});
    }
    ReductionKernelRequest parts = request;
    parts.output = ReductionKernelRequest::Output::partial_states;
    parts.output_buffers = partials;
    parts.kernel_name = kernel_name + "_parts";
    if (split->combine == SplitCombine::last_block) {
      // One kernel: its blocks count their arrivals per output tile in a zeroed workspace.
      parts.kernel_name = kernel_name;
      Kernel k = build(parts);
      const BufferArg counters{
          reduction + ".arrivals", Halide::Int(32), {counter_count(k)}, BufferArg::Role::workspace};
      program.workspaces.push_back({counters.name, counters.type, counters.shape, /*zeroed=*/true});
      combine_in_last_block(k, request, partials, split->parts, counters);
      kernels.push_back(k);
    } else {
      kernels.push_back(build(parts));
      Kernel combine = combine_kernel(request, partials, split->parts);
      collect_arguments(graph, combine, buffers, ctx.intermediates);
      for (BufferArg p : partials) {
        p.role = BufferArg::Role::input;
        combine.buffers.insert(combine.buffers.begin(), p);
      }
      kernels.push_back(combine);
    }
  } else {
    const bool sum = monoid.state.size() == 1 && output.outputs() == 1 && !request.consumer &&
                     (output.output_types()[0] == f32 || output.output_types()[0] == i32);
    if (!sum)
      fail(
          "schedule of '{}': split_reduction with atomics needs an f32 or i32 sum stored as it is (no fused "
          "epilogue); use SplitCombine::kernel",
          reduction);
    Kernel zero =
        pointwise_kernel(kernel_name + "_zero", extents, [&](const std::vector<Halide::Expr> &coords) {
          return stmt::store(buffers[0].name, make_zero(output.output_types()[0]),
                             flat_index(coords, extents));
        });
    collect_arguments(graph, zero, buffers);
    kernels.push_back(zero);
    ReductionKernelRequest parts = request;
    parts.output = ReductionKernelRequest::Output::atomic_sum;
    parts.kernel_name = kernel_name + "_atomic";
    kernels.push_back(build(parts));
  }
  for (Kernel &k : kernels) {
    k.schedule_summary = approvals + k.schedule_summary;
    for (const Workspace &w : k.workspaces)
      if (std::none_of(program.workspaces.begin(), program.workspaces.end(),
                       [&](const Workspace &p) { return p.name == w.name; }))
        program.workspaces.push_back(w);
  }
  program.kernels.insert(program.kernels.end(), kernels.begin(), kernels.end());
}

void tree_stage(const StageContext &ctx, const FuncRealization &stage, const std::vector<BufferArg> &buffers,
                const std::string &kernel_name, LoweredProgram &program) {
  const Func &f = stage.func;
  const std::string approval = approve_tree(f, stage.extents, *ctx.schedule);
  StageKernelRequest request{ctx.graph, ctx.realization, ctx.schedule, ctx.target, kernel_name,
                             f,         stage.extents,   buffers,      false,      ctx.intermediates};
  const FuncSchedule *fs = ctx.schedule->find(f.name());
  if (!fs || !fs->reduction_split()) {
    program.kernels.push_back(build_tree_kernel(request));
    program.kernels.back().schedule_summary = approval + program.kernels.back().schedule_summary;
    return;
  }
  const ReductionSplit &split = *fs->reduction_split();
  const Monoid &monoid = *f.definition().reduction->monoid;
  std::vector<BufferArg> partials;
  std::vector<Halide::Expr> shape = {Halide::Expr(split.parts)};
  shape.insert(shape.end(), stage.extents.begin(), stage.extents.end());
  for (const Component &c : monoid.state) {
    partials.push_back({f.name() + ".partial." + c.name, c.type, shape, BufferArg::Role::workspace});
    program.workspaces.push_back({partials.back().name, c.type, shape});
  }
  StageKernelRequest parts = request;
  parts.kernel_name = kernel_name + "_parts";
  parts.output_buffers = partials;
  parts.partial_states = true;
  program.kernels.push_back(build_tree_kernel(parts));
  program.kernels.back().schedule_summary = approval + program.kernels.back().schedule_summary;
  ReductionKernelRequest values;
  values.graph = ctx.graph;
  values.reduction = f;
  values.extents = stage.extents;
  values.target = ctx.target;
  values.kernel_name = kernel_name;
  values.output_buffers = buffers;
  values.intermediates = ctx.intermediates;
  Kernel combine = combine_kernel(values, partials, split.parts);
  collect_arguments(*ctx.graph, combine, buffers, ctx.intermediates);
  for (BufferArg p : partials) {
    p.role = BufferArg::Role::input;
    combine.buffers.insert(combine.buffers.begin(), p);
  }
  program.kernels.push_back(combine);
}

}  // namespace

void lower_stage(const StageContext &ctx, const FuncRealization &stage, const std::vector<BufferArg> &buffers,
                 const std::string &kernel_name, LoweredProgram &program) {
  const Func &f = stage.func;
  if (f.definition().is_reduction()) {
    const FuncSchedule *fs = ctx.schedule->find(f.name());
    if (!fs || binds_reduction_to_threads(f, fs))
      return tree_stage(ctx, stage, buffers, kernel_name, program);
    return tiled_reduction_stage(ctx, stage, f, buffers, kernel_name, program);
  }
  for (const FuncRealization &r : ctx.realization->funcs)
    if (r.placement == Placement::epilogue && r.consumer == f.name())
      return tiled_reduction_stage(ctx, stage, r.func, buffers, kernel_name, program);
  std::string approvals;
  for (const FuncRealization *r : ctx.realization->computed_at(f.name()))
    approvals += approve_tree(r->func, r->extents, *ctx.schedule);
  StageKernelRequest request{ctx.graph, ctx.realization, ctx.schedule, ctx.target, kernel_name,
                             f,         stage.extents,   buffers,      false,      ctx.intermediates};
  program.kernels.push_back(build_row_kernel(request));
  program.kernels.back().schedule_summary = approvals + program.kernels.back().schedule_summary;
}

}  // namespace twist
