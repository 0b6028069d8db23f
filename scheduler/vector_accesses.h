#pragma once
// 16-byte accesses. A thread that computes a run of `width` consecutive points along its stage's innermost
// dimension (an unrolled loop, the run's lane) reads each input that moves along its last dimension with the
// lane, and stores each output, with 16-byte copies (ld.global.v4 / st.global.v4) through register arrays
// instead of `width` scalar accesses. The copies are the synchronous copy intrinsic, so the interpreter
// checks their alignment as the GPU needs it.
//
// A read moves with the lane when its coordinates before the last do not depend on the lane and its last one
// is `first + lane + offset`, with `offset` a constant multiple of the copy's elements such that the whole
// run stays inside the input's row (then it is the read the scalar path makes, without the clamp it never
// needed). Rows whose length is not a constant need it to be a multiple of the copy's elements: a condition
// on the scalar arguments (conditions()), which the kernel states as a Requirement with a scalar fallback.
#include <algorithm>
#include <string>
#include <vector>

#include "lang/graph.h"
#include "scheduler/expr_lowering.h"
#include "scheduler/loop_nest.h"

namespace twist {

constexpr int kVectorBytes = 16;

struct VectorRun {
  std::string lane;     // the unrolled loop over the run's points, 0 .. width - 1
  int width = 1;        // points per run
  Halide::Expr first;   // the innermost coordinate of the run's first point, a multiple of `width`
  Halide::Expr extent;  // the innermost extent of the points: first + width <= extent
  Halide::Expr lane_var() const;
};

// The bytes of each copy that moves `width` elements of `type`: 16, or 4 or 8 for a shorter run; 0 when a run
// is not a whole number of such copies (then it is not vectorized).
int vector_copy_bytes(const Type &type, int width);

// The copies that move `width` elements of `type` from element `src_index` of `src` to `dst_index` of `dst`
// (global buffers or register arrays), vector_copy_bytes at a time; both indices aligned to them.
Halide::Internal::Stmt vector_copies(const std::string &dst, const Halide::Expr &dst_index,
                                     const std::string &src, const Halide::Expr &src_index, const Type &type,
                                     int width);

class VectorReads {
 public:
  VectorReads(const FuncGraph &graph, VectorRun run) : graph_(graph), run_(std::move(run)) {}

  // The value of `input` at the lowered `coords`: a register of an array filled by 16-byte copies where the
  // read moves with the run's lane, else the clamped global load.
  Halide::Expr read(const Input &input, const std::vector<Halide::Expr> &coords);
  // Makes every input of the graph read through read().
  void install(ExprLowering &lowering);
  // `body`, which uses the reads, after the copies that fill their register arrays, inside the arrays.
  Halide::Internal::Stmt around(const Halide::Internal::Stmt &body) const;
  // Conditions on the scalar arguments that the copies' alignment needs (simplified, none constant).
  const std::vector<Halide::Expr> &conditions() const { return conditions_; }
  int vectorized() const { return static_cast<int>(arrays_.size()); }
  // The register arrays among them that hold runs of `input`.
  int vectorized(const std::string &input) const {
    return static_cast<int>(
        std::count_if(arrays_.begin(), arrays_.end(), [&](const Array &a) { return a.input == input; }));
  }

 private:
  struct Array {
    std::string name, input, key;
    Type type;
    Halide::Expr source;  // the element index of the run's first point in the input
  };
  const FuncGraph &graph_;
  VectorRun run_;
  std::vector<Array> arrays_;
  std::vector<Halide::Expr> conditions_;
};

// Stores `value` (over the run's lane) at elements `index + lane` of the global `buffer` of `type`: computed
// into a register array by the unrolled lane loop, then moved with 16-byte copies. `index` must be a
// multiple of the copy's elements (vector_copy_bytes(type, width) must be non-zero).
Halide::Internal::Stmt vector_store(const std::string &buffer, const Type &type, const Halide::Expr &value,
                                    const Halide::Expr &index, const VectorRun &run);

}  // namespace twist
