#pragma once
// The orders in which a schedule may fold a reduction, evaluated on the CPU: what tiling, a cooperative
// tree and split-K do to the sequence of combines. For an associative monoid every order gives the
// sequential fold's value up to rounding; the tests and the error analysis compare them.
#include <span>
#include <string>

#include "algebra/monoid_evaluator.h"

namespace twist::algebra {

struct FoldOrder {
  enum class Kind {
    sequential,  // ((e . x1) . x2) . ...
    tiled,       // each tile of `size` elements folded from the identity, then the tiles in order
    tree,        // adjacent pairs combined level by level (an odd one out carried up)
    split,       // `size` contiguous parts of near-equal length, each folded, then combined in order
  };
  Kind kind = Kind::sequential;
  int size = 0;

  static FoldOrder sequential() { return {Kind::sequential, 0}; }
  static FoldOrder tiled(int tile) { return {Kind::tiled, tile}; }
  static FoldOrder tree() { return {Kind::tree, 0}; }
  static FoldOrder split(int parts) { return {Kind::split, parts}; }
  std::string name() const;  // "sequential", "tiled(16)", "tree", "split(4)"
};

// The monoid's fold of the lifted elements in the given order (the identity for an empty list).
Values fold_in_order(const MonoidEvaluator &monoid, std::span<const Values> elements, const FoldOrder &order);

}  // namespace twist::algebra
