#pragma once
// Integer sums in a canonical form: the coefficient of every distinct term collected, so that terms which
// cancel do cancel. Halide's simplifier keeps factored sums such as ((jo*4 + a)*8 + b) - jo*32, in which a
// tile's origin subtracted from a coordinate inside the tile stays in the index; the CUDA compiler then
// cannot see that a swizzled shared-memory address is the same in every iteration.
#include <functional>

#include <Halide.h>

namespace twist {

// `e` (a 32-bit integer expression) as a sum of distinct terms times constants plus a constant. Terms are the
// maximal parts of `e` that are not sums, differences or products by constants; they are kept as they are.
Halide::Expr canonical_sum(const Halide::Expr &e);

// `e` (a 32-bit integer expression) split into two canonical sums: the terms `keep` accepts, with the
// constant, and the other terms. Their sum is `e`.
struct SplitSum {
  Halide::Expr kept, rest;
};
SplitSum split_sum(const Halide::Expr &e, const std::function<bool(const Halide::Expr &term)> &keep);

}  // namespace twist
