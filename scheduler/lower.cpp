#include "scheduler/lower.h"

#include "algebra/legality.h"
#include "lang/error.h"
#include "lang/graph.h"
#include "scheduler/chained_kernel.h"
#include "scheduler/epilogue.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/intrinsics.h"
#include "scheduler/kernel_assembly.h"
#include "scheduler/loops.h"
#include "scheduler/reduction_kernel.h"
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

Halide::Expr product(const std::vector<Halide::Expr> &extents) {
  Halide::Expr n = 1;
  for (const Halide::Expr &e : extents) n = n * e;
  return simplify(n);
}

// One thread per output point, `threads` to a block: the point's coordinates from the flat index.
std::vector<Halide::Expr> point_coords(const std::vector<Halide::Expr> &extents, const Halide::Expr &flat) {
  std::vector<Halide::Expr> coords(extents.size());
  Halide::Expr rest = flat;
  for (int d = static_cast<int>(extents.size()) - 1; d >= 0; --d) {
    coords[d] = d == 0 ? rest : rest % extents[d];
    rest = rest / extents[d];
  }
  return coords;
}

constexpr int kPointThreads = 256;

Kernel pointwise_kernel(const std::string &name, const std::vector<Halide::Expr> &extents,
                        const std::function<Stmt(const std::vector<Halide::Expr> &)> &body) {
  Kernel k;
  k.name = name;
  k.threads = kPointThreads;
  const Halide::Expr points = product(extents);
  k.grid = {simplify((points + (kPointThreads - 1)) / kPointThreads), Halide::Expr(1), Halide::Expr(1)};
  const Halide::Expr flat = Variable::make(Halide::Int(32), "point");
  k.body = hoist_invariants(simplify_exprs(
      LetStmt::make("point", intrinsic::block_index(0) * kPointThreads + intrinsic::thread_index(),
                    IfThenElse::make(flat < points, body(point_coords(extents, flat))))));
  return k;
}

// The second kernel of a split reduction: folds the parts' states with the monoid's combine, then finalizes.
// The parts go into `chains` interleaved folds (part p into chain p % chains), which are then combined
// pairwise: a reassociation of the fold that the split's own associativity check already approved. The
// chains' loads are independent and the dependent chain is parts / chains combines long instead of parts.
Kernel combine_kernel(const ReductionKernelRequest &values, const std::vector<BufferArg> &partials,
                      int parts) {
  const Monoid &m = *values.reduction.definition().reduction->monoid;
  int chains = 8;
  while (parts % chains != 0) chains /= 2;
  Kernel k =
      pointwise_kernel(values.kernel_name, values.extents, [&](const std::vector<Halide::Expr> &coords) {
        const State a = m.lhs(), b = m.rhs();
        std::vector<Halide::Expr> shape = {Halide::Expr(parts)};
        shape.insert(shape.end(), values.extents.begin(), values.extents.end());
        // state[into] = combine(state[into], b), with b's components given by `rhs`.
        auto combine_into = [&](const Halide::Expr &into, const std::function<Halide::Expr(size_t)> &rhs) {
          std::vector<Stmt> stores;
          for (size_t c = 0; c < m.state.size(); ++c)
            stores.push_back(stmt::store("state." + m.state[c].name, m.combine[c], into));
          std::vector<std::pair<std::string, Halide::Expr>> operands;
          for (size_t c = 0; c < m.state.size(); ++c) {
            operands.push_back(
                {a[c].as<Variable>()->name, load(m.state[c].type, "state." + m.state[c].name, into)});
            operands.push_back({b[c].as<Variable>()->name, rhs(c)});
          }
          return stmt::let_all(operands, Block::make(stores));
        };
        const Halide::Expr chain = stmt::var("chain"), step = stmt::var("step");
        std::vector<Halide::Expr> at = {step * chains + chain};
        at.insert(at.end(), coords.begin(), coords.end());
        Stmt fold = combine_into(
            chain, [&](size_t c) { return load(m.state[c].type, partials[c].name, flat_index(at, shape)); });
        std::vector<Stmt> steps;
        for (size_t c = 0; c < m.state.size(); ++c)
          steps.push_back(
              stmt::unrolled("chain", chains, stmt::store("state." + m.state[c].name, m.identity[c], chain)));
        steps.push_back(For::make("step", 0, parts / chains, ForType::Serial, Halide::DeviceAPI::None,
                                  stmt::unrolled("chain", chains, fold)));
        for (int half = chains / 2; half >= 1; half /= 2)
          steps.push_back(stmt::unrolled("chain", half, combine_into(chain, [&](size_t c) {
                                           return load(m.state[c].type, "state." + m.state[c].name,
                                                       chain + half);
                                         })));
        std::vector<Halide::Expr> state;
        for (const Component &c : m.state) state.push_back(load(c.type, "state." + c.name, 0));
        steps.push_back(epilogue_stores(values, coords, state, Halide::Expr()));
        Stmt body = Block::make(steps);
        for (const Component &c : m.state)
          body = Allocate::make("state." + c.name, c.type, Halide::MemoryType::Register, {chains},
                                const_true(), body);
        return body;
      });
  k.schedule_summary =
      fmt::format("  folds {} partial states per point with {}'s combine, in {} interleaved chains\n", parts,
                  m.name, chains);
  return k;
}

}  // namespace

LoweredProgram lower(const Func &output, const Schedule &schedule, const Target &target) {
  const FuncGraph graph = walk({output});
  if (output.shape().empty())
    fail("func '{}' is the program's output, so it needs its extents: call {}.set_shape({{...}})",
         output.name(), output.name());
  LoweredProgram program;
  program.name = output.name();
  const std::vector<Halide::Expr> extents = to_halide(output.shape());
  for (int o = 0; o < output.outputs(); ++o)
    program.outputs.push_back({output.outputs() == 1 ? output.name() : fmt::format("{}.{}", output.name(), o),
                               output.output_types()[o], extents, BufferArg::Role::output});
  for (const Input &in : graph.inputs)
    program.inputs.push_back({in.name(), in.type(), to_halide(in.shape()), BufferArg::Role::input});

  ReductionKernelRequest request;
  request.graph = &graph;
  request.extents = extents;
  request.target = target;
  if (output.definition().is_reduction()) {
    request.reduction = output;
  } else {
    std::vector<std::string> reductions;
    for (const Expr &v : output.definition().values) reductions_called(graph, v, reductions);
    if (reductions.size() != 1)
      fail(
          "func '{}' is pure and reads {} reduction funcs; this lowering fuses exactly one reduction into "
          "its output's epilogue",
          output.name(), reductions.size());
    request.reduction = graph.func(reductions[0]);
    request.consumer = output;
  }
  const std::string &reduction = request.reduction.name();
  request.schedule = schedule.find(reduction);
  if (!request.schedule)
    fail(
        "the program's reduction '{}' has no schedule: schedule it (tile and bind its loops) with "
        "schedule[{}]",
        reduction, reduction);
  const Monoid &monoid = *request.reduction.definition().reduction->monoid;
  request.output_buffers = program.outputs;

  // Every primitive that reassociates the reduction asks the algebra first.
  std::string approvals;
  std::optional<algebra::AssociativityOverride> user_override;
  if (request.schedule->associativity_override())
    user_override = algebra::AssociativityOverride{*request.schedule->associativity_override()};
  // The checker folds states as long as this schedule's reduction loops and split parts.
  algebra::CheckOptions check_options;
  for (const LoopDim &d : make_loops(request.reduction, extents, request.schedule).dims)
    if (const int64_t *n = Halide::Internal::as_const_int(d.extent); n && d.reduction)
      check_options.fold_lengths.push_back(static_cast<int>(*n));
  if (request.schedule->reduction_split())
    check_options.fold_lengths.push_back(request.schedule->reduction_split()->parts);
  auto approve = [&](const std::string &what) {
    approvals +=
        "  " + algebra::require_reassociable(monoid, what, user_override, check_options).to_string() + "\n";
  };
  auto reduction_order = [&](const FuncSchedule &fs) {
    std::vector<std::string> order;
    for (const LoopDim &d : make_loops(request.reduction, extents, &fs).dims)
      if (d.reduction) order.push_back(d.name);
    return order;
  };
  if (reduction_order(*request.schedule) != reduction_order(request.schedule->without_reorders()))
    approve(fmt::format("reorder of the reduction loops of {}", reduction));
  if (request.schedule->atom())
    approve(fmt::format("matrix_atom of {} over {}", reduction, request.schedule->atom()->k));
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

  request.kernel_name = program.name;
  const auto &split = request.schedule->reduction_split();
  if (!split) {
    program.kernels.push_back(build(request));
  } else if (split->combine == SplitCombine::kernel) {
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
    parts.kernel_name = program.name + "_parts";
    program.kernels.push_back(build(parts));
    Kernel combine = combine_kernel(request, partials, split->parts);
    std::vector<BufferArg> written = program.outputs;
    collect_arguments(graph, combine, written);
    for (BufferArg p : partials) {
      p.role = BufferArg::Role::input;
      combine.buffers.insert(combine.buffers.begin(), p);
    }
    program.kernels.push_back(combine);
  } else {
    const bool sum = monoid.state.size() == 1 && output.outputs() == 1 && !request.consumer &&
                     (output.output_types()[0] == f32 || output.output_types()[0] == i32);
    if (!sum)
      fail(
          "schedule of '{}': split_reduction with atomics needs an f32 or i32 sum stored as it is (no fused "
          "epilogue); use SplitCombine::kernel",
          reduction);
    Kernel zero =
        pointwise_kernel(program.name + "_zero", extents, [&](const std::vector<Halide::Expr> &coords) {
          return stmt::store(output.name(), make_zero(output.output_types()[0]), flat_index(coords, extents));
        });
    collect_arguments(graph, zero, program.outputs);
    program.kernels.push_back(zero);
    ReductionKernelRequest parts = request;
    parts.output = ReductionKernelRequest::Output::atomic_sum;
    parts.kernel_name = program.name + "_atomic";
    program.kernels.push_back(build(parts));
  }
  for (Kernel &k : program.kernels) k.schedule_summary = approvals + k.schedule_summary;
  for (const Kernel &k : program.kernels)
    for (const ScalarArg &s : k.scalars)
      if (std::none_of(program.scalars.begin(), program.scalars.end(),
                       [&](auto &x) { return x.name == s.name; }))
        program.scalars.push_back(s);
  return program;
}

}  // namespace twist
