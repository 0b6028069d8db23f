#include "scheduler/pointwise_kernel.h"

#include "scheduler/intrinsics.h"
#include "scheduler/kernel_assembly.h"
#include "scheduler/stmt_building.h"

namespace twist {

using namespace Halide::Internal;

namespace {

constexpr int kPointThreads = 256;

Halide::Expr product(const std::vector<Halide::Expr> &extents) {
  Halide::Expr n = 1;
  for (const Halide::Expr &e : extents) n = n * e;
  return simplify(n);
}

}  // namespace

std::vector<Halide::Expr> point_coords(const std::vector<Halide::Expr> &extents, const Halide::Expr &flat) {
  std::vector<Halide::Expr> coords(extents.size());
  Halide::Expr rest = flat;
  for (int d = static_cast<int>(extents.size()) - 1; d >= 0; --d) {
    coords[d] = d == 0 ? rest : rest % extents[d];
    rest = rest / extents[d];
  }
  return coords;
}

Kernel pointwise_kernel(const std::string &name, const std::vector<Halide::Expr> &extents,
                        const std::function<Stmt(const std::vector<Halide::Expr> &)> &body,
                        int points_per_thread) {
  Kernel k;
  k.name = name;
  k.threads = kPointThreads;
  const Halide::Expr points = product(extents);
  const int per_block = kPointThreads * points_per_thread;
  k.grid = {simplify((points + (per_block - 1)) / per_block), Halide::Expr(1), Halide::Expr(1)};
  const Halide::Expr flat = Variable::make(Halide::Int(32), "point");
  Halide::Expr first = intrinsic::block_index(0) * per_block + intrinsic::thread_index();
  if (points_per_thread > 1) first = first + stmt::var("point.k") * kPointThreads;
  Stmt one =
      LetStmt::make("point", first, IfThenElse::make(flat < points, body(point_coords(extents, flat))));
  if (points_per_thread > 1) one = stmt::unrolled("point.k", points_per_thread, one);
  k.body = hoist_invariants(simplify_exprs(one));
  return k;
}

}  // namespace twist
