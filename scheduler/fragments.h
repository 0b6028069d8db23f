#pragma once
// The mma.sync m16n8k16 atom's fragments: which lane and register hold which element of A, B and the
// accumulator (the layouts stated in intrinsics.h), and the ldmatrix row addresses that fill A and B
// fragments from a staged tile.
#include <string>
#include <vector>

#include <Halide.h>

#include "scheduler/staging.h"

namespace twist {

// The lane of the calling thread within its warp.
Halide::Expr lane();

// The accumulator element e (0..3) of the calling lane sits at (row, col) of the 16 x 8 tile.
Halide::Expr accumulator_row(int e);
Halide::Expr accumulator_col(int e);

// The wgmma accumulator element e (0 .. N/2 - 1) of the calling thread sits at (row, col) of its warpgroup's
// 64 x N tile (hopper::accumulator_position).
Halide::Expr wgmma_accumulator_row(int e);
Halide::Expr wgmma_accumulator_col(int e);

// An operand of the atom: A (16 rows by 16 k) or B (16 k by 8 columns). Its fragment holds pairs of
// elements along k. `other` is its non-k dimension.
enum class AtomOperand { a, b };
inline int fragment_elements(AtomOperand op) {
  return op == AtomOperand::a ? 8 : 4;
}
inline int fragment_matrices(AtomOperand op) {
  return op == AtomOperand::a ? 4 : 2;
}

// For the ldmatrix that loads `op`'s fragment: the (other, k) offset within the atom of the row whose address
// the calling lane supplies. `k_contiguous` says whether the staged tile stores consecutive k next to each
// other (no transpose) or consecutive `other` (transpose).
struct LdmatrixRow {
  Halide::Expr other, k;
  Halide::Expr pair;  // for ldmatrix_row_of_pair: 0 or 1, which of the two B fragments the row belongs to
};
LdmatrixRow ldmatrix_row(AtomOperand op, bool k_contiguous);
// The same for one x4 ldmatrix that loads the B fragments of two neighbouring atoms (matrices 0 and 1 for
// the first, 2 and 3 for the second): half the instructions of two x2 loads.
LdmatrixRow ldmatrix_row_of_pair(bool k_contiguous);

// One operand's fragments loaded with ldmatrix from its staged tile, for every point of the register loops
// the fragment array spans.
struct FragmentLoad {
  AtomOperand op;
  std::vector<Halide::Expr> coords;  // the operand's input coordinates, with the atom's loops as variables
  std::string k_loop, other_loop;    // the atom's k loop, and its row (A) or column (B) loop
  std::string unused_loop;           // the atom loop the operand does not use (set to 0)
  std::vector<std::pair<std::string, int>> register_loops;  // (name, extent), outermost first
  std::string fragment;                                     // the register array
  const StagePlan *stage = nullptr;
  Halide::Expr slot;            // the stage's pipeline slot at this point of the loops
  Halide::Expr dst_offset = 0;  // where in the register array this load's fragments start
};
Halide::Internal::Stmt load_fragments(const FragmentLoad &f, const std::string &func);

}  // namespace twist
