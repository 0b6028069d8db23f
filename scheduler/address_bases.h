#pragma once
// Shared-memory addresses in the form the hardware adds for free: register + constant.
//
// A warp's fragment loads (ldmatrix), a block's staged copies and an epilogue's stores into an output tile
// address shared memory through swizzled indices: a function of the thread index, of unrolled loops (which
// fragment, which copy round) and of serial loops (which pipeline slot). Written as one expression per
// access, the CUDA compiler recomputes each swizzle (shifts, XORs, multiply-adds) in every iteration of the
// loops around it, or keeps dozens of them in registers, and a tensor-core loop spends its issue slots and
// registers on address arithmetic. Most of those indices differ from one another by a constant for every
// thread (an atom 16 rows further down, a copy round further along the tile), which the compiler cannot see
// through the XOR.
//
// This pass unrolls the unrolled loops around such accesses and writes each shared index as
//   (its terms that move with serial loops) + base + constant,
// where `base` is a thread-dependent value computed once per thread, before every loop, and shared by every
// access whose thread-dependent part differs from it by a constant. Which indices share a base is decided by
// evaluating them at every thread index of the block: exact, whatever the swizzle.
#include <Halide.h>

namespace twist {

// `body` (a kernel body of `threads` threads) with the shared indices of its ldmatrix loads, of its copies
// into and out of shared memory and of its stores into shared memory rebased as described above.
Halide::Internal::Stmt share_address_bases(const Halide::Internal::Stmt &body, int threads);

}  // namespace twist
