#pragma once
// Binding a lowered program's scalar arguments at run time: size parameters from the shapes of the input
// tensors, the rest as given; and evaluating the grid, shapes and requirements that depend on them.
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "scheduler/loop_nest.h"

namespace twist {

using Scalars = std::map<std::string, double>;

// Every scalar argument of `program`: those in `given` as they are, and each size parameter that is an
// input's extent from `input_shapes`. An input missing or of the wrong rank, an extent that disagrees with
// a parameter bound before, or a scalar left unbound, is an error naming both sides.
Scalars bind_arguments(const LoweredProgram &program,
                       const std::map<std::string, std::vector<int64_t>> &input_shapes, const Scalars &given);

// The value of an i32 expression over the scalars (grid sizes, extents).
int64_t evaluate_int(const Halide::Expr &e, const Scalars &scalars);
std::vector<int64_t> evaluate_shape(const std::vector<Halide::Expr> &shape, const Scalars &scalars);

// Throws, naming the kernel, the condition, its `why` and the scalars, if a requirement does not hold.
void check_requirements(const Kernel &kernel, const Scalars &scalars);

// The buffers of `kernel` that it addresses with 32-bit offsets (all but Kernel::wide_offsets) and that hold
// more than 2^31 - 1 elements over these scalars.
std::set<std::string> buffers_past_32_bit_offsets(const Kernel &kernel, const Scalars &scalars);
// Whether there are none.
bool offsets_fit(const Kernel &kernel, const Scalars &scalars);

// The kernel itself if its requirements hold for these scalars, else its fallback (recursively); throws as
// check_requirements does when no variant can run. Where buffers the variant chosen addresses with 32-bit
// offsets hold more than 2^31 - 1 elements, its variant with 64-bit offsets into them (wide_variant in
// scheduler/wide_offsets.h), if it has wide_variants.
const Kernel &select_variant(const Kernel &kernel, const Scalars &scalars);

}  // namespace twist
