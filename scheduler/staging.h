#pragma once
// Staging an input in shared memory: the footprint (the box of the input that one iteration of the stage's
// loop reads, over every thread of the block), its layout in shared memory, and the cooperative copy that
// fills it with the schedule's transport.
#include <functional>
#include <string>
#include <vector>

#include "lang/input.h"
#include "scheduler/intrinsics.h"
#include "scheduler/loop_nest.h"
#include "scheduler/loops.h"
#include "scheduler/schedule.h"

namespace twist {

struct StagePlan {
  StageDirective directive;
  std::string input;  // the tensor in global memory (an output, for a write-back)
  Type type;
  std::vector<Halide::Expr> shape;  // the tensor's extents
  // A write-back collects a block's tile of an output in shared memory and copies it out whole: the copies go
  // from shared to global memory, and only chunks inside the output are written.
  bool write_back = false;
  std::string buffer;  // the shared array
  int at = -1;         // the stage's loop, an index into LoopStructure::dims
  // The box one iteration reads: per input dimension its first coordinate, over the loops outside the
  // stage (its own loop included), and its constant extent.
  std::vector<Halide::Expr> box_min;
  std::vector<int> box_extent;
  int rows = 1, cols = 1;  // the box as a matrix: cols along the input's last (contiguous) dimension
  int elem_bytes = 2;
  int copy_bytes = 16;  // bytes per copy instruction (4, 8, 16), or elem_bytes for element-wise copies
  SharedLayout layout = SharedLayout::row_major;  // the layout used (a swizzle that cannot apply falls back)
  int row_pitch = 1;                              // elements between rows (cols, or cols + padding)
  int slot_elems = 0;                             // elements of one pipeline slot
  // TMA: the slot is cols / box_cols boxes of rows x box_cols elements, each with rows of `swizzle` bytes.
  int box_cols = 0;
  TensorMap::Swizzle swizzle = TensorMap::Swizzle::none;
  // The tensor map the copies read through, and the copies of the stage loop's iteration `iteration` into
  // `slot`, completing on the mbarrier `barrier` (issued by one thread; out-of-bounds elements read as zero).
  TensorMap tensor_map() const;
  Stmt tma_copies(const Halide::Expr &iteration, const Halide::Expr &slot,
                  const intrinsic::MbarrierRef &barrier) const;
  // A slot whose tile is the same for every CTA of a cluster of `ctas`: the CTA of rank `rank` copies its
  // share of the boxes (boxes / ctas of them, which must divide) and multicasts them to every CTA.
  struct ClusterShare {
    Halide::Expr rank;
    int ctas;
  };
  int tma_box_count() const { return cols / box_cols; }
  // A sub-tiled TMA write-back (FuncSchedule::store_output_sub_tiles): the slot holds `sub_tile_buffers`
  // boxes, box b of the tile going through buffer b % sub_tile_buffers; 0: the slot holds the whole tile.
  int sub_tile_buffers = 0;
  // The box of the tile that holds the element at output coordinates `coords` (of a TMA plan).
  Halide::Expr box_of(const std::vector<Halide::Expr> &coords) const;
  // The buffer of the slot that holds box `box` (the box itself, unless sub-tiled).
  Halide::Expr buffer_of_box(const Halide::Expr &box) const;
  Stmt tma_multicast_copies(const Halide::Expr &iteration, const Halide::Expr &slot,
                            const intrinsic::MbarrierRef &barrier, const ClusterShare &share) const;
  // A TMA write-back's stores of the whole tile in `slot` (issued by one thread, in its bulk groups; elements
  // outside the output are not written).
  Stmt tma_stores(const Halide::Expr &slot = 0) const;
  // A TMA write-back's store of the tile's box `box` alone (from its buffer, with sub_tile_buffers).
  Stmt tma_store_box(int box, const Halide::Expr &slot = 0) const;
  // The wgmma operand (matrix descriptor) of the atom tile of a TMA stage whose first element is at input
  // coordinates `coords` in `slot`: K-major when the atom's k runs along the tile's rows (the input's
  // contiguous dimension), MN-major when it runs across them (hopper_layouts.h gives the layouts).
  intrinsic::WgmmaOperand wgmma_operand(const std::vector<Halide::Expr> &coords, const Halide::Expr &slot,
                                        bool k_major) const;

  int bytes() const { return slot_elems * directive.depth * elem_bytes; }
  // The shared-array index of the element at input coordinates `coords`, in pipeline slot `slot`.
  Halide::Expr index_of(const std::vector<Halide::Expr> &coords, const Halide::Expr &slot) const;
  Halide::Expr index_of_cell(const Halide::Expr &row, const Halide::Expr &col,
                             const Halide::Expr &slot) const;
  // The index a thread's own load or store of that element addresses: index_of, with the hardware's swizzle
  // applied in a TMA tile (whose copies and wgmma descriptors take the unswizzled index and swizzle it).
  Halide::Expr thread_index_of(const std::vector<Halide::Expr> &coords, const Halide::Expr &slot) const;
  // Which copies guard each chunk against the input's extents (zero-filling outside): all, none (the caller
  // knows the box is inside), or those of a tile whose box is not wholly inside (decided per tile).
  enum class Guards { by_tile, all, none };
  // The copy of the footprint for the stage loop's iteration `iteration` into `slot`, shared by `threads`
  // threads, as statements of the schedule's transport (async copies are not committed here).
  Stmt copy(const Halide::Expr &iteration, const Halide::Expr &slot, int threads,
            Guards guards = Guards::by_tile) const;
  // The box's first coordinate in dimension `c` at the stage loop's iteration `iteration`.
  Halide::Expr box_min_at(const Halide::Expr &iteration, size_t c) const;
  // copy's chunks, each guarded or none.
  Stmt copy_chunks(const Halide::Expr &iteration, const Halide::Expr &slot, int threads, bool guarded) const;
  // Conditions on the scalar arguments this plan relies on (row pitches that keep copies aligned).
  std::vector<Requirement> requirements;
  std::string summary() const;
};

// Lays out a TMA stage's slot as boxes of the widest swizzled rows its tile's rows allow (see StagePlan).
void plan_tma_boxes(StagePlan &p, const std::string &func);

// Plans the stage `d` of `input`, whose reads (lowered coordinates, one tuple per call) are `reads`. With
// `element_copies` the copies move one element each, which needs no alignment (the fallback for shapes
// whose rows do not keep vector copies aligned).
StagePlan plan_stage(const StageDirective &d, const Input &input, const LoopStructure &loops,
                     const std::vector<std::vector<Halide::Expr>> &reads, bool element_copies);
// Plans the write-back of output buffer `name` (of `type` and `shape`) whose points one block stores at
// `coords` (lowered coordinates, over the block's loops), with the copy width and requirements of a stage;
// with Transport::tma the tile is laid out in TMA boxes (plan_tma_boxes) and stored by tma_stores.
StagePlan plan_write_back(const std::string &name, const Type &type, const std::vector<Halide::Expr> &shape,
                          const LoopStructure &loops, const std::vector<Halide::Expr> &coords,
                          bool element_copies, Transport transport = Transport::plain);

// `body` inside the shared arrays of `plans`.
Halide::Internal::Stmt with_shared_arrays(const std::vector<StagePlan> &plans, Halide::Internal::Stmt body);

// How a stage loop keeps the copies of tiles that lie inside their inputs free of guards.
enum class PrefetchGuards {
  // One loop: each iteration's copies branch on whether their tile's box is inside. The body appears once,
  // but the compiler predicates the branch, so every iteration issues both versions of the copies.
  by_tile,
  // Two loops, split at first_guarded_prefetch: the first copies without guards, the second with them.
  // Every copy instruction issued is needed, but the body appears twice, which costs registers in a large
  // body.
  partitioned,
};

// The loop `name` over [min, min + extent), with `body` as its body and the stages `here` (all staged at this
// loop) keeping shared memory filled ahead of the iterations that read it: with one slot, copy, wait and
// synchronize at the top of each iteration; with a ring of `depth` slots, iteration x computes on slot
// x % depth while the copies for x + depth - 1 are in flight.
Stmt staged_loop(const std::string &name, const Halide::Expr &min, const Halide::Expr &extent,
                 Halide::Internal::ForType type, const std::vector<const StagePlan *> &here, int threads,
                 const Stmt &body, const std::string &func, PrefetchGuards guards);

// A loop over [min, min + extent) that copies, at iteration x, the boxes of `plans` for iteration x + ahead:
// the first iteration from which those copies may need guards (a box that crosses its input's edge, or
// x + ahead past the loop's end). Before it, every copy is in bounds.
Halide::Expr first_guarded_prefetch(const std::vector<const StagePlan *> &plans, const Halide::Expr &min,
                                    const Halide::Expr &extent, int ahead);

// The serial loop `name` over [min, min + extent) as two loops: [min, split) with body(false) and the rest
// with body(true), the body whose copies are guarded.
Stmt partitioned_loop(const std::string &name, const Halide::Expr &min, const Halide::Expr &extent,
                      const Halide::Expr &split, const std::function<Stmt(bool guarded)> &body);

// The coordinate tuples at which `e` reads input `name`.
std::vector<std::vector<Halide::Expr>> reads_of(const Halide::Expr &e, const std::string &name);

}  // namespace twist
