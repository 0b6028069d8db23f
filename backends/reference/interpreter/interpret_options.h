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
};

}  // namespace twist::reference
