#pragma once
// The simplest kernel shape: one thread per point of a domain, 256 threads to a block.
#include <functional>
#include <string>
#include <vector>

#include "scheduler/loop_nest.h"

namespace twist {

// The coordinates of the point at row-major `flat` index in a domain of `extents`.
std::vector<Halide::Expr> point_coords(const std::vector<Halide::Expr> &extents, const Halide::Expr &flat);

// A kernel whose every thread runs `body(coords)` for its own `points_per_thread` points of `extents` (points
// past the last are skipped). A thread's points are a block's width apart, so that each of its unrolled
// accesses is coalesced across the block and the thread has that many independent loads in flight. Its
// buffers and scalars are left for collect_arguments.
Kernel pointwise_kernel(const std::string &name, const std::vector<Halide::Expr> &extents,
                        const std::function<Halide::Internal::Stmt(const std::vector<Halide::Expr> &)> &body,
                        int points_per_thread = 1);

}  // namespace twist
