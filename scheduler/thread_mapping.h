#pragma once
// Where a kernel's bound loops come from: block loops from blockIdx (in the schedule's block order), warp
// loops from the warp index and thread loops from the thread (or lane) index.
#include <array>
#include <string>
#include <utility>
#include <vector>

#include "scheduler/loops.h"
#include "scheduler/schedule.h"
#include "scheduler/target.h"

namespace twist {

struct ThreadMapping {
  int threads = 1;  // per block
  int warps = 0;    // loops bound to warps use threads / 32 warps; 0 when no loop is bound to warps
  std::array<Halide::Expr, 3> grid;
  // Each bound loop's variable as an expression of blockIdx / threadIdx, in definition order.
  std::vector<std::pair<std::string, Halide::Expr>> bound_values;
  // The block loops the blocks take last first (BlockLaunchOrder::reversed), for the kernel summary.
  std::vector<std::string> reversed_loops;

  // Threads that no loop is bound to (a warp-specialized kernel's producer, ping-pong's second team), in
  // whole warps.
  void add_warps(int count) {
    threads += 32 * count;
    warps += count;
  }
};

// `lanes_taken` is set when a matrix atom occupies the 32 lanes of each warp (no loop may be bound to
// threads). The grid's y extent is rounded up to a multiple of `grid_y_multiple`, so that a cluster's blocks
// pair rows of tiles (the extra row's tiles lie outside the output).
ThreadMapping map_threads(const LoopStructure &loops, const BlockLaunchOrder &order, bool lanes_taken,
                          const Target &target, int grid_y_multiple = 1);

// The kernel summary's line of the block's threads and the grid, once the kernel's builder has added the
// threads that no loop is bound to.
std::string launch_summary(const ThreadMapping &m);

// Wraps `body` in LetStmts that define the bound loop variables.
Halide::Internal::Stmt define_bound_loops(const ThreadMapping &m, Halide::Internal::Stmt body);

}  // namespace twist
