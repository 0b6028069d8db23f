#pragma once
// How the reference backend's loop-nest interpreter runs a kernel.
#include "lang/evaluate.h"

namespace twist::reference {

struct InterpretOptions {
  // typed: every value rounded to its declared type (f16 and bf16 emulated), as the GPU computes; exact and
  // extended: the same loop nest in double or long double, to separate rounding from schedule errors.
  Arithmetic arithmetic = Arithmetic::typed;
  // Report shared-memory races: an access to an element that a cp.async in flight will write, and two
  // threads touching one element between barriers where at least one of them writes it.
  bool check_races = true;
  // The order the grid's blocks run in. On a GPU blocks run in any order and concurrently; a kernel whose
  // blocks hand work to each other (SplitCombine::last_block) must give the same result in every order, so
  // its tests run it out of order too.
  enum class BlockOrder {
    in_order,  // x fastest, then y, then z
    reversed,  // the last block first
    shuffled,  // a fixed pseudo-random permutation
  };
  BlockOrder block_order = BlockOrder::in_order;
};

}  // namespace twist::reference
