#include "scheduler/fragments.h"

#include "scheduler/intrinsics.h"

namespace twist {

Halide::Expr lane() { return intrinsic::thread_index() % 32; }

// g = lane / 4 picks the row pair, t = lane % 4 the column pair (see intrinsics.h).
Halide::Expr accumulator_row(int e) { return lane() / 4 + 8 * (e / 2); }
Halide::Expr accumulator_col(int e) { return (lane() % 4) * 2 + e % 2; }

LdmatrixRow ldmatrix_row(AtomOperand op, bool k_contiguous) {
  // Lanes 8m..8m+7 give the rows of matrix m. A's four matrices are (other, k) blocks (0,0), (1,0), (0,1),
  // (1,1) in units of 8, which puts them in registers a[0..7] in the order the atom wants; B's two are its
  // k blocks 0 and 1.
  const int matrices = fragment_matrices(op);
  Halide::Expr m = (lane() / 8) % matrices, r = lane() % 8;
  Halide::Expr other_block = op == AtomOperand::a ? m % 2 : Halide::Expr(0);
  Halide::Expr k_block = op == AtomOperand::a ? m / 2 : m;
  // Without a transpose each row of a matrix runs along k; with one, along `other`.
  if (k_contiguous) return {other_block * 8 + r, k_block * 8, 0};
  return {other_block * 8, k_block * 8 + r, 0};
}

LdmatrixRow ldmatrix_row_of_pair(bool k_contiguous) {
  Halide::Expr m = (lane() / 8) % 4, r = lane() % 8;
  Halide::Expr k_block = m % 2, pair = m / 2;
  if (k_contiguous) return {r, k_block * 8, pair};
  return {Halide::Expr(0), k_block * 8 + r, pair};
}

}  // namespace twist
