// The TMA transport of a stage: its slots as boxes of swizzled rows, its tensor map and its copies.
#include "lang/error.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/hopper_layouts.h"
#include "scheduler/staging.h"

namespace twist {

void plan_tma_boxes(StagePlan &p, const std::string &func) {
  // The refusals say which copy TMA cannot make and what to use instead.
  const std::string copy = p.write_back ? fmt::format("store_output(Transport::tma) of '{}'", p.input)
                                        : fmt::format("the TMA stage of '{}'", p.input);
  const char *instead = p.write_back ? "store_output(Transport::plain)" : "Transport::cp_async";
  // The widest swizzle whose row the tile's row fills: 128 bytes, else 64 or 32.
  const int row_bytes = p.cols * p.elem_bytes;
  int width = 0;
  for (int w : {128, 64, 32})
    if (row_bytes % w == 0) {
      width = w;
      break;
    }
  if (width == 0)
    fail(
        "schedule of '{}': {} has rows of {} elements ({} bytes), which no swizzle allows: the 32, 64 and "
        "128-byte swizzles need rows of a multiple of 32 bytes ({} elements); tile the contiguous dimension "
        "to a multiple of that, or use {}",
        func, copy, p.cols, row_bytes, 32 / p.elem_bytes, instead);
  p.swizzle = width == 128  ? TensorMap::Swizzle::b128
              : width == 64 ? TensorMap::Swizzle::b64
                            : TensorMap::Swizzle::b32;
  p.box_cols = width / p.elem_bytes;
  for (size_t c = 0; c + 1 < p.box_extent.size(); ++c)
    if (p.box_extent[c] > 256)
      fail(
          "schedule of '{}': {} needs a box of {} elements in dimension {}, but TMA boxes have at most 256 "
          "elements per dimension; use a smaller tile, or {}",
          func, copy, p.box_extent[c], c, instead);
  // Each box must start at a multiple of the swizzle pattern (8 rows), so that the pattern the wgmma
  // descriptor assumes is the one the copy wrote.
  if ((p.rows * width) % hopper::swizzle_alignment(p.swizzle) != 0)
    fail(
        "schedule of '{}': {} has boxes of {} rows; swizzled boxes need a multiple of 8 rows; use tiles of "
        "such rows, or {}",
        func, copy, p.rows, instead);
  p.layout = SharedLayout::swizzled;
  p.row_pitch = p.cols;
  p.slot_elems = p.rows * p.cols;
  p.copy_bytes = 16;
  // The tensor's rows must start at 16-byte aligned addresses: TMA's global strides are multiples of 16.
  const int elems = 16 / p.elem_bytes;
  if (p.shape.size() > 1) {
    const Halide::Expr pitch = p.shape.back();
    const std::optional<int64_t> c = constant_value(pitch);
    if (c && *c % elems != 0)
      fail(
          "schedule of '{}': '{}' has rows of {} elements; TMA needs rows that are a multiple of 16 bytes "
          "({} elements); use {} for it",
          func, p.input, *c, elems, instead);
    if (!c)
      p.requirements.push_back(
          {pitch % elems == 0,
           fmt::format(
               "the last extent of '{}' ({}) must be a multiple of {} for its TMA copies (global rows "
               "are 16-byte aligned); lower with {} for other shapes",
               p.input, pitch, elems, instead)});
  }
}

TensorMap StagePlan::tensor_map() const {
  std::vector<int> box = box_extent;
  box.back() = box_cols;
  return TensorMap{input + "_map", input, shape, box, swizzle};
}

namespace {

// The copy of the TMA plan's box `box` (of the cols / box_cols side by side) at the stage loop's iteration
// `iteration`, between the shared array at `shared_offset` and the tensor, multicast to the CTAs of `mask`.
Stmt box_copy(const StagePlan &p, const Halide::Expr &iteration, const Halide::Expr &box,
              const Halide::Expr &shared_offset, bool load, const intrinsic::MbarrierRef &barrier,
              const Halide::Expr &mask = Halide::Expr()) {
  std::vector<Halide::Expr> coordinates;
  for (size_t c = 0; c < p.box_extent.size(); ++c) coordinates.push_back(p.box_min_at(iteration, c));
  coordinates.back() = Halide::Internal::simplify(coordinates.back() + box * p.box_cols);
  return intrinsic::tma_copy(
      {load, p.tensor_map().name, p.buffer, shared_offset, coordinates, barrier, mask});
}

// The copies of a TMA plan's boxes at the stage loop's iteration `iteration`, between `slot` and the tensor:
// all of them, or with `share` the issuing CTA's share, multicast to the cluster.
Stmt box_copies(const StagePlan &p, const Halide::Expr &iteration, const Halide::Expr &slot, bool load,
                const intrinsic::MbarrierRef &barrier, const StagePlan::ClusterShare *share = nullptr) {
  const int boxes = share ? p.tma_box_count() / share->ctas : p.tma_box_count();
  std::vector<Stmt> copies;
  for (int k = 0; k < boxes; ++k) {
    // The box's index among the slot's boxes.
    const Halide::Expr b = share ? share->rank * boxes + k : Halide::Expr(k);
    const Halide::Expr box_offset = share ? b * (p.rows * p.box_cols) : Halide::Expr(k * p.rows * p.box_cols);
    copies.push_back(box_copy(p, iteration, b, slot * p.slot_elems + box_offset, load, barrier,
                              share ? Halide::Expr((1 << share->ctas) - 1) : Halide::Expr()));
  }
  return Halide::Internal::Block::make(copies);
}

}  // namespace

Stmt StagePlan::tma_copies(const Halide::Expr &iteration, const Halide::Expr &slot,
                           const intrinsic::MbarrierRef &barrier) const {
  return box_copies(*this, iteration, slot, true, barrier);
}

Stmt StagePlan::tma_multicast_copies(const Halide::Expr &iteration, const Halide::Expr &slot,
                                     const intrinsic::MbarrierRef &barrier, const ClusterShare &share) const {
  TWIST_CHECK(tma_box_count() % share.ctas == 0, "{} TMA boxes of '{}' shared by {} CTAs", tma_box_count(),
              input, share.ctas);
  return box_copies(*this, iteration, slot, true, barrier, &share);
}

Stmt StagePlan::tma_stores(const Halide::Expr &slot) const {
  TWIST_CHECK(write_back && directive.transport == Transport::tma,
              "TMA stores of a plan that is not a TMA write-back");
  return box_copies(*this, Halide::Expr(), slot, false, {});
}

Stmt StagePlan::tma_store_box(int box, const Halide::Expr &slot) const {
  TWIST_CHECK(write_back && directive.transport == Transport::tma,
              "TMA stores of a plan that is not a TMA write-back");
  return box_copy(*this, Halide::Expr(), box,
                  Halide::Internal::simplify(slot * slot_elems + buffer_of_box(box) * (rows * box_cols)),
                  false, {});
}

intrinsic::WgmmaOperand StagePlan::wgmma_operand(const std::vector<Halide::Expr> &coords,
                                                 const Halide::Expr &slot, bool k_major) const {
  // K-major: 8-row groups of swizzled rows 8 * width bytes apart (the leading offset is unused). MN-major:
  // the same along k, and the boxes of box_cols columns one box apart.
  const int width = hopper::swizzle_bytes(swizzle);
  const int box_bytes = rows * box_cols * elem_bytes;
  return {buffer,
          Halide::Internal::simplify(index_of(coords, slot)),
          k_major ? 0 : box_bytes,
          8 * width,
          swizzle,
          !k_major};
}

}  // namespace twist
