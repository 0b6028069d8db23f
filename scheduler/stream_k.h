#pragma once
// The work of a persistent grid (FuncSchedule::persistent) as units of (output tile, range of k-tiles), and
// stream-K (FuncSchedule::stream_k), which splits the last waves' tiles along k so that every block ends at
// the same time.
//
// Without stream-K, block b runs the whole tiles b, b + blocks, ... A wave that is not full leaves SMs idle
// for a whole tile's time (798 tiles on 132 SMs: 6.05 waves, the last with 6 tiles). With stream-K the grid
// is `blocks` blocks, and:
//   - the data-parallel waves: every block runs `dp_waves` whole tiles, tiles 0 .. dp_waves * blocks - 1;
//   - the stream-K tiles: the rest, by StreamKTiles either the partial wave plus one full wave (so that each
//     block's share is at least one tile's k-tiles and each tile has at most two parts) or the partial wave
//     alone (the full waves stay whole and in step along k; a tile has about blocks / tail parts); when the
//     tiles are fewer than the blocks, all of them. Their k-tiles, tile after tile, are `sk_iterations`, cut
//     into `sk_blocks` ranges of equal length (within one) that the first `sk_blocks` blocks run; a range
//     that crosses a tile's end is one unit per tile it touches. A tile's parts are the ranges that touch it,
//     in the order of their blocks, which is the order of their k-tiles.
// A unit that holds a tile's whole k range stores the tile as a data-parallel one does. Any other stores its
// states in a workspace slot of its own, fences them and takes a ticket from its tile's counter (a zeroed
// workspace); the last of the tile's parts to arrive fences, folds the other parts into its registers with
// the monoid's combine (the parts before its own on the left, those after it on the right: the split's
// reassociation, never a reordering) and resets the counter, then runs the epilogue once on the whole tile.
// Blocks may therefore run in any order and need not be resident together.
#include <functional>
#include <string>
#include <vector>

#include <Halide.h>

#include "lang/monoid.h"
#include "scheduler/schedule.h"
#include "scheduler/thread_mapping.h"

namespace twist {

// The names a unit's body reads (let-bound by over_units around it).
namespace unit {
inline constexpr const char *kTile = "tile.index";          // the output tile, in raster order
inline constexpr const char *kFirstK = "unit.k_first";      // the unit's first k-tile
inline constexpr const char *kKCount = "unit.k_count";      // its k-tiles
inline constexpr const char *kRingBase = "unit.ring_base";  // ring iteration of k-tile t: ring_base + t
}  // namespace unit

struct PersistentUnits {
  Halide::Expr tiles;    // output tiles (batch included)
  Halide::Expr k_tiles;  // k-tiles of a whole tile
  int blocks = 0;        // persistent(blocks)
  bool stream_k = false;
  StreamKTiles split_tiles = StreamKTiles::tail_and_wave;
  // Stream-K's split (defined with stream_k only).
  Halide::Expr dp_waves;       // whole tiles each block runs first
  Halide::Expr sk_tiles;       // the tiles split along k: tiles dp_waves * blocks and after
  Halide::Expr sk_iterations;  // their k-tiles
  Halide::Expr sk_blocks;      // the blocks that share them: min(blocks, sk_iterations)

  // The workspace a stream-K kernel needs: a slot of partial states per (block, stream-K tile) pair a block
  // may run (slot b + its tile's index among the stream-K tiles, under 3 blocks), and a counter per
  // stream-K tile (under 2 blocks).
  int partial_slots() const { return 3 * blocks; }
  int counters() const { return 2 * blocks; }
};

// A persistent grid's output tiles: tile t is the block that the one-block-per-tile grid would have run as
// blockIdx (t % x, t / x % y, t / (x y)), so the tiles keep that grid's launch order (its raster groups and
// reversed loops, which map_threads put in the bound values).
struct PersistentTiles {
  Halide::Expr count;
  // The value of each loop bound to a block axis at tile unit::kTile.
  std::vector<std::pair<std::string, Halide::Expr>> coordinates;
};

// Makes `mapping`'s grid persistent (FuncSchedule::persistent): the bound values that read the block index
// move out of it into the tiles' coordinates, and the grid becomes persistent_grid(tiles, blocks, stream_k)
// blocks along x. Shared by every kernel builder that takes persistent().
PersistentTiles make_grid_persistent(ThreadMapping &mapping, int blocks, bool stream_k);

// The persistent grid: `blocks` with stream-K (every block takes a share of the last tiles), else
// min(blocks, tiles).
Halide::Expr persistent_grid(const Halide::Expr &tiles, int blocks, bool stream_k);

PersistentUnits plan_persistent_units(const Halide::Expr &tiles, const Halide::Expr &k_tiles, int blocks,
                                      bool stream_k, StreamKTiles split_tiles = StreamKTiles::tail_and_wave);

// The block that runs stream-K k-tile `i` (counted from the first stream-K tile's first k-tile) under `u`'s
// split: the last b with b * sk_iterations / sk_blocks <= i. A tile's parts are the blocks from the owner of
// its first k-tile to the owner of its last. (The GEMM rule's cost model evaluates the same split, constants
// folded, to count the parts and partial tiles of a plan.)
Halide::Expr stream_k_owner(const PersistentUnits &u, const Halide::Expr &i);

// Block blockIdx.x's units in the order it runs them, `body(split)` for each under the unit:: lets;
// `split` is true for the stream-K units, whose body's tile may be one part of several (stream_k_fixup).
// With a `team` (ping-pong: `teams` consumer warpgroups taking the block's whole tiles in turn), the units of
// that team only: the block's tiles team, team + teams, ...; not with stream-K.
Halide::Internal::Stmt over_units(const PersistentUnits &units,
                                  const std::function<Halide::Internal::Stmt(bool split)> &body,
                                  const Halide::Expr &team = {}, int teams = 1);

// How the fixup reads and writes the states a thread holds for its points of the tile.
struct TileStates {
  const Monoid *monoid = nullptr;
  int threads = 0;                    // the threads holding the tile (a warp-specialized kernel's consumers)
  int points = 0;                     // state points per thread
  std::vector<std::string> partials;  // a workspace per state component: partial_slots() x points x threads
  std::string counters;               // i32, zeroed: counters()
  // `body` once per point held by the thread, with `point` its index in 0 .. points - 1.
  std::function<Halide::Internal::Stmt(const std::function<Halide::Internal::Stmt(const Halide::Expr &)> &)>
      for_each_point;
  std::function<std::vector<Halide::Expr>()> state;                                    // at the current point
  std::function<Halide::Internal::Stmt(const std::vector<Halide::Expr> &)> set_state;  // at the current point
  Halide::Internal::Stmt sync;  // a barrier of the `threads`
};

// The end of a stream-K unit (in over_units' body with split = true): where the unit is one of several
// parts of its tile, the part goes to the workspace and the last part to arrive folds the tile, then
// `epilogue` runs in the block that holds the whole tile.
Halide::Internal::Stmt stream_k_fixup(const PersistentUnits &units, const TileStates &states,
                                      const Halide::Internal::Stmt &epilogue);

}  // namespace twist
