#include "scheduler/lower.h"

#include "lang/graph.h"
#include "scheduler/default_schedule.h"
#include "scheduler/realization.h"
#include "scheduler/stage_lowering.h"
#include "scheduler/wide_offsets.h"

namespace twist {

namespace {

// Every kernel, and the fallback it stands in for, launched dependently where the target allows it.
Kernel with_dependent_launch(Kernel k, const Target &target) {
  k.dependent_launch = target.has_dependent_launch;
  if (k.fallback) k.fallback = std::make_shared<const Kernel>(with_dependent_launch(*k.fallback, target));
  return k;
}

}  // namespace

LoweredProgram lower(const Func &output, const Schedule &schedule, const Target &target) {
  const FuncGraph graph = walk({output});
  const Schedule completed = with_default_schedules(graph, schedule);
  const Realization realization = plan_realization(graph, completed);
  LoweredProgram program;
  program.name = output.name();
  for (const Input &in : graph.inputs)
    program.inputs.push_back({in.name(), in.type(), to_halide(in.shape()), BufferArg::Role::input});
  StageContext context{&graph, &realization, &completed, target, {}};
  // Stages in dependency order: each one's buffer is an intermediate of the stages after it.
  for (const FuncRealization &stage : realization.funcs) {
    const Func &f = stage.func;
    if (stage.placement == Placement::output) {
      for (int o = 0; o < f.outputs(); ++o)
        program.outputs.push_back({f.outputs() == 1 ? f.name() : fmt::format("{}.{}", f.name(), o),
                                   f.output_types()[o], stage.extents, BufferArg::Role::output});
      lower_stage(context, stage, program.outputs, program.name, program);
    } else if (stage.placement == Placement::root) {
      const BufferArg buffer{f.name(), f.output_types()[0], stage.extents, BufferArg::Role::workspace};
      program.workspaces.push_back({buffer.name, buffer.type, buffer.shape});
      lower_stage(context, stage, {buffer}, f.name(), program);
      context.intermediates.push_back(buffer);
    }
  }
  // 64-bit offsets into the buffers that can pass 2^31 - 1 elements (wide_offsets.h): where their extents
  // are symbolic, variants that select_variant makes and launches only at the shapes that need them.
  for (Kernel &k : program.kernels) k = with_dependent_launch(with_wide_offsets(k), target);
  for (const Kernel &k : program.kernels)
    for (const ScalarArg &s : k.scalars)
      if (std::none_of(program.scalars.begin(), program.scalars.end(),
                       [&](auto &x) { return x.name == s.name; }))
        program.scalars.push_back(s);
  return program;
}

}  // namespace twist
