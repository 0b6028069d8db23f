#include "scheduler/fragments.h"

#include "lang/error.h"
#include "scheduler/intrinsics.h"

namespace twist {

Halide::Expr lane() {
  return intrinsic::thread_index() % 32;
}

// g = lane / 4 picks the row pair, t = lane % 4 the column pair (see intrinsics.h).
Halide::Expr accumulator_row(int e) {
  return lane() / 4 + 8 * (e / 2);
}
Halide::Expr accumulator_col(int e) {
  return (lane() % 4) * 2 + e % 2;
}
Halide::Expr wgmma_accumulator_row(int e) {
  const Halide::Expr t = intrinsic::thread_index() % 128;
  return (t / 32) * 16 + (t % 32) / 4 + 8 * ((e % 4) / 2);
}
Halide::Expr wgmma_accumulator_col(int e) {
  return 8 * (e / 4) + (lane() % 4) * 2 + e % 2;
}

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

Halide::Internal::Stmt load_fragments(const FragmentLoad &f, const std::string &func) {
  using namespace Halide::Internal;
  auto var = [](const std::string &n) { return Variable::make(Halide::Int(32), n); };
  auto step = [&](const std::string &v) {
    return simplify(substitute(v, 1, f.coords.back()) - substitute(v, 0, f.coords.back()));
  };
  // ldmatrix reads 8 contiguous elements per row: along k (no transpose) or along the other dimension.
  bool k_contiguous;
  if (is_const_one(step(f.k_loop))) {
    k_contiguous = true;
  } else if (is_const_one(step(f.other_loop))) {
    k_contiguous = false;
  } else {
    fail(
        "schedule of '{}': ldmatrix needs '{}' staged with k or its other dimension contiguous, but its last "
        "coordinate is {}",
        func, f.stage->input, f.coords.back());
  }
  // B fragments of neighbouring atoms along the innermost register loop load in pairs.
  const bool paired =
      f.op == AtomOperand::b && !f.register_loops.empty() && f.register_loops.back().second % 2 == 0;
  const LdmatrixRow row = paired ? ldmatrix_row_of_pair(k_contiguous) : ldmatrix_row(f.op, k_contiguous);
  std::map<std::string, Halide::Expr> at_row = {
      {f.k_loop, row.k}, {f.other_loop, row.other}, {f.unused_loop, 0}};
  const std::string pair_var = paired ? f.register_loops.back().first + ".pair" : "";
  if (paired) at_row[f.register_loops.back().first] = var(pair_var) * 2 + row.pair;
  std::vector<Halide::Expr> row_coords;
  for (const Halide::Expr &c : f.coords) row_coords.push_back(substitute(at_row, c));
  Halide::Expr dst = 0;
  for (const auto &[name, extent] : f.register_loops) dst = dst * extent + var(name);
  dst = dst * fragment_elements(f.op) + f.dst_offset;
  if (paired) dst = substitute(f.register_loops.back().first, var(pair_var) * 2, dst);
  Stmt s = intrinsic::matrix_move({.direction = intrinsic::MatrixMove::Direction::load,
                                   .registers = f.fragment,
                                   .registers_index = simplify(dst),
                                   .shared = f.stage->buffer,
                                   .shared_index = f.stage->index_of(row_coords, f.slot),
                                   .matrices = paired ? 4 : fragment_matrices(f.op),
                                   .transpose = !k_contiguous});
  for (auto it = f.register_loops.rbegin(); it != f.register_loops.rend(); ++it) {
    const bool pair_loop = paired && it == f.register_loops.rbegin();
    s = For::make(pair_loop ? pair_var : it->first, 0, pair_loop ? it->second / 2 : it->second,
                  ForType::Unrolled, Halide::DeviceAPI::None, s);
  }
  return s;
}

}  // namespace twist
