#pragma once
// What the lowering tests share: random inputs, running a lowered program on the interpreter next to the
// oracle, and compiling its kernels for both targets.
#include <map>
#include <string>
#include <vector>

#include "backends/reference/host_tensor.h"
#include "backends/reference/interpreter/interpret_options.h"
#include "lang/func.h"
#include "scheduler/loop_nest.h"
#include "scheduler/schedule.h"

namespace twist::testing {

using Tensors = std::map<std::string, reference::HostTensor>;

// Normal(0, 1) tensors for every input of `output`'s graph, with extents from `sizes` (size parameter
// values).
Tensors random_inputs(const Func &output, const std::map<std::string, double> &sizes, uint64_t seed);

// The relative L2 error of the interpreted loop nest (typed arithmetic) against the oracle (exact). With
// `wide_offsets`, the program's kernels address every buffer that can pass 2^31 - 1 elements with 64-bit
// offsets (force_wide_offsets in scheduler/wide_offsets.h), whatever the shape.
double lowered_error(const Func &output, const Schedule &schedule, const Tensors &inputs,
                     const std::map<std::string, double> &scalars,
                     const reference::InterpretOptions &options = {}, bool wide_offsets = false);

// f(i) = the affine maps h -> a(i, c) h + b(i, c) composed in order over the columns c, in f64: a reduction
// whose monoid (algebra::affine) does not commute, so a split whose combine reorders the parts gets a wrong
// answer. Its names start with `prefix`: sizes "<prefix>_rows" and "<prefix>_cols", reduction loop
// "<prefix>_r.x". The inputs are kept with the func: a func's inputs must be live while it lowers.
struct AffineRows {
  Input a, b;
  Func f;
};
AffineRows affine_rows(const std::string &prefix);

// The orders the interpreter runs a grid's blocks in, for kernels whose blocks communicate through memory (a
// split's last block folding the parts): the answer must not depend on which block arrives first.
inline constexpr reference::InterpretOptions::BlockOrder kBlockOrders[] = {
    reference::InterpretOptions::BlockOrder::in_order, reference::InterpretOptions::BlockOrder::reversed,
    reference::InterpretOptions::BlockOrder::shuffled};
reference::InterpretOptions in_block_order(reference::InterpretOptions::BlockOrder order);
const char *block_order_name(reference::InterpretOptions::BlockOrder order);

// Compiles every kernel of `program` (and their fallbacks) for sm_80 and sm_90a; returns the sources.
std::vector<std::string> compile_for_both_targets(const LoweredProgram &program);

}  // namespace twist::testing
