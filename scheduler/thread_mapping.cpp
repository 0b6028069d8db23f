#include "scheduler/thread_mapping.h"

#include "lang/error.h"
#include "scheduler/intrinsics.h"

namespace twist {

using namespace Halide::Internal;

namespace {

// Splits `index` into the loops `dims` (outermost first, the last varying fastest).
void decompose(const std::vector<const LoopDim *> &dims, Halide::Expr index,
               std::vector<std::pair<std::string, Halide::Expr>> &out) {
  Halide::Expr stride = 1;
  std::vector<std::pair<std::string, Halide::Expr>> values;
  for (auto it = dims.rbegin(); it != dims.rend(); ++it) {
    const LoopDim *d = *it;
    values.push_back({d->name, simplify((index / stride) % d->extent)});
    stride = simplify(stride * d->extent);
  }
  out.insert(out.end(), values.rbegin(), values.rend());
}

}  // namespace

ThreadMapping map_threads(const LoopStructure &loops, const BlockLaunchOrder &order, bool lanes_taken,
                          const Target &target, int grid_y_multiple) {
  ThreadMapping m;
  m.grid = {Halide::Expr(1), Halide::Expr(1), Halide::Expr(1)};
  const LoopDim *block_dims[3] = {nullptr, nullptr, nullptr};
  std::vector<const LoopDim *> warp_dims, thread_dims, warpgroup_dims;
  for (const LoopDim &d : loops.dims) {
    int axis = d.binding == Binding::block_x   ? 0
               : d.binding == Binding::block_y ? 1
               : d.binding == Binding::block_z ? 2
                                               : -1;
    if (axis >= 0) {
      if (block_dims[axis])
        fail(
            "schedule of '{}': loops '{}' and '{}' are both bound to {}; bind one loop per block axis (fuse "
            "them first)",
            loops.func, block_dims[axis]->name, d.name, to_string(d.binding));
      block_dims[axis] = &d;
      m.grid[axis] = d.extent;
    } else if (d.binding == Binding::warp) {
      d.constant_extent(loops.func, "binding it to warps");
      warp_dims.push_back(&d);
    } else if (d.binding == Binding::warpgroup) {
      d.constant_extent(loops.func, "binding it to warpgroups");
      warpgroup_dims.push_back(&d);
    } else if (d.binding == Binding::thread) {
      d.constant_extent(loops.func, "binding it to threads");
      thread_dims.push_back(&d);
    }
  }
  int warp_count = 1, thread_count = 1;
  for (const LoopDim *d : warp_dims) warp_count *= d->constant_extent(loops.func, "binding it to warps");
  for (const LoopDim *d : thread_dims)
    thread_count *= d->constant_extent(loops.func, "binding it to threads");
  if (lanes_taken && !thread_dims.empty())
    fail(
        "schedule of '{}': loop '{}' is bound to threads, but the matrix atom already uses every lane of "
        "each warp; "
        "bind it to warps or make it serial",
        loops.func, thread_dims[0]->name);
  const Halide::Expr tid = intrinsic::thread_index();
  if (!warpgroup_dims.empty()) {
    // A warpgroup's 128 threads run its wgmma atoms together: no loop inside it is bound to warps or threads.
    if (!warp_dims.empty() || !thread_dims.empty())
      fail(
          "schedule of '{}': loop '{}' is bound to warpgroups, and '{}' to {}; a warpgroup's threads run its "
          "wgmma atoms together, so bind loops to warpgroups only (or to warps and threads only)",
          loops.func, warpgroup_dims[0]->name, (warp_dims.empty() ? thread_dims : warp_dims)[0]->name,
          warp_dims.empty() ? "threads" : "warps");
    int warpgroups = 1;
    for (const LoopDim *d : warpgroup_dims)
      warpgroups *= d->constant_extent(loops.func, "binding it to warpgroups");
    m.warps = 4 * warpgroups;
    m.threads = 128 * warpgroups;
    decompose(warpgroup_dims, tid / 128, m.bound_values);
  } else if (!warp_dims.empty() || lanes_taken) {
    if (!lanes_taken && thread_count != 32)
      fail(
          "schedule of '{}': with loops bound to warps, the loops bound to threads must cover exactly the 32 "
          "lanes of "
          "a warp, but they cover {}",
          loops.func, thread_count);
    m.warps = warp_count;
    m.threads = 32 * warp_count;
    decompose(warp_dims, tid / 32, m.bound_values);
    decompose(thread_dims, tid % 32, m.bound_values);
  } else {
    m.threads = thread_count;
    decompose(thread_dims, tid, m.bound_values);
  }
  if (m.threads > target.max_threads_per_block)
    fail(
        "schedule of '{}' binds {} threads per block ({} warp(s) x {} thread(s)), but {} allows at most {}; "
        "use "
        "smaller thread tiles or serial loops",
        loops.func, m.threads, std::max(warp_count, 1), m.warps ? 32 : thread_count, target.arch,
        target.max_threads_per_block);
  if (grid_y_multiple > 1)
    m.grid[1] = simplify((m.grid[1] + grid_y_multiple - 1) / grid_y_multiple * grid_y_multiple);
  // Block loops, in the raster order: with a group g, blocks walk down g rows of tiles before moving right,
  // so that the blocks running at one time share rows of A and columns of B in L2.
  Halide::Expr bx = intrinsic::block_index(0), by = intrinsic::block_index(1), bz = intrinsic::block_index(2);
  const int raster_group = order.raster_group;
  if (raster_group > 1 && block_dims[0] && block_dims[1]) {
    Halide::Expr gx = m.grid[0], gy = m.grid[1];
    Halide::Expr linear = by * gx + bx;
    Halide::Expr per_group = raster_group * gx;
    Halide::Expr first_row = (linear / per_group) * raster_group;
    Halide::Expr rows = Halide::min(gy - first_row, raster_group);
    Halide::Expr in_group = linear % per_group;
    by = first_row + in_group % rows;
    bx = in_group / rows;
  }
  Halide::Expr block_values[3] = {bx, by, bz};
  for (const std::string &name : order.reversed) {
    int axis = 0;
    while (axis < 3 && !(block_dims[axis] && block_dims[axis]->name == name)) ++axis;
    if (axis == 3)
      fail(
          "schedule of '{}': reverse('{}') orders the blocks of a loop bound to a block axis, and '{}' is "
          "{}; "
          "bind it to Binding::block_x, block_y or block_z first",
          loops.func, name, name,
          loops.index(name) < 0 ? fmt::format("not one of its loops ({})", loops.names())
                                : fmt::format("bound to {}", to_string(loops.dim(name).binding)));
    if (axis == 1 && grid_y_multiple > 1)
      fail(
          "schedule of '{}': reverse('{}') and cluster({}) both order block_y (the cluster pads it to a "
          "multiple of {} blocks); reverse a loop on another block axis",
          loops.func, name, grid_y_multiple, grid_y_multiple);
    block_values[axis] = simplify(block_dims[axis]->extent - 1 - block_values[axis]);
    m.reversed_loops.push_back(name);
  }
  for (int axis = 0; axis < 3; ++axis)
    if (block_dims[axis])
      m.bound_values.insert(m.bound_values.begin(), {block_dims[axis]->name, block_values[axis]});
  return m;
}

std::string launch_summary(const ThreadMapping &m) {
  std::string s =
      fmt::format("  {} thread(s) per block{}; grid ({}, {}, {})\n", m.threads,
                  m.warps ? fmt::format(" in {} warp(s)", m.warps) : "", m.grid[0], m.grid[1], m.grid[2]);
  for (const std::string &loop : m.reversed_loops) s += fmt::format("  blocks take {} last first\n", loop);
  return s;
}

Stmt define_bound_loops(const ThreadMapping &m, Stmt body) {
  for (auto it = m.bound_values.rbegin(); it != m.bound_values.rend(); ++it)
    body = LetStmt::make(it->first, it->second, body);
  return body;
}

}  // namespace twist
