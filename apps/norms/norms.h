#pragma once
// The row-wise ops LLMs run between their GEMMs, as twist programs over rows of `hidden` elements:
//   softmax      y = exp(x - m) / l, m = reduce(max, over the row, x), l = reduce(sum, the row, exp(x - m))
//   layernorm    y = (x - mean) rsqrt(var + eps) w + b, mean and var by one of LayerNormStatistics
//   rmsnorm      y = x rsqrt(ss / hidden + eps) w, ss = reduce(sum, over the row, x^2)
//   add_rmsnorm  h = x + residual, y = rmsnorm(h): two outputs, h and y (the residual stream and the norm)
//   swiglu       y = silu(x[:, :hidden]) * x[:, hidden:], from gate and up projections side by side
// Arithmetic in f32, inputs and outputs in f16 or bf16. The row length is a constant of the program (so that
// a row can be kept in shared memory and x read once); the number of rows is the size parameter `rows`.
#include <optional>
#include <string>
#include <vector>

#include "lang/twist.h"
#include "scheduler/schedule.h"

namespace twist::apps {

enum class NormKind { softmax, layernorm, rmsnorm, add_rmsnorm, swiglu };
const char *to_string(NormKind k);
// The kind named `name` ("softmax", "layernorm", ...), or nothing.
std::optional<NormKind> parse_norm_kind(const std::string &name);
std::vector<NormKind> all_norm_kinds();

// How LayerNorm computes a row's mean and variance (an algorithm the program states, not a backend choice).
enum class LayerNormStatistics {
  // Two sums in sequence: the mean, then the squared deviations around it. Each costs an add (and a
  // multiply-add) per element, and the second reads the row again from where the first kept it (registers or
  // shared memory).
  two_pass,
  // One fold of the Welford monoid (count, mean, M2): one pass, but a division per element on the fold's
  // critical path.
  welford,
  // One fold of two sums, of d = x - K and of d^2, with K the row's first element (the shifted-data
  // algorithm): mean = K + S1 / n, var = S2 / n - (S1 / n)^2. One tree, where two_pass has two; subtracting a
  // value of the row keeps S2 / n and (S1 / n)^2 within (n - 1) times the variance (no element lies further
  // than sqrt(n - 1) deviations from the mean), so the difference does not cancel as the plain sum of
  // squares does for rows far from zero: var's relative error is at worst about n times f32's epsilon.
  shifted_sums,
};
// The statistics named `name` ("two_pass", "welford", "shifted_sums"), or nothing.
std::optional<LayerNormStatistics> parse_layernorm_statistics(const std::string &name);
const char *to_string(LayerNormStatistics s);

struct NormOptions {
  Type dtype = f16;
  int hidden = 4096;
  float eps = 1e-6f;
  std::string prefix = "";  // prepended to every func and input name, so that several instances coexist
  LayerNormStatistics layernorm = LayerNormStatistics::two_pass;
};

struct Norm {
  NormKind kind;
  NormOptions options;
  SizeParam rows;
  std::vector<Input> inputs;  // x first, then w, b or residual as the op has them
  Var i, j;
  RDom r;
  std::vector<Func> reductions;  // the row statistics, computed at the rows of `out`
  std::vector<Func> inlined;     // pure funcs that `out` reads (kept alive with it: calls name them)
  Func out;
};

Norm make_norm(NormKind kind, const NormOptions &options = {});

// Every row statistic computed at loop i of the output: one block per row, the row kept in registers (or in
// shared memory where it is not a whole number of 16-byte runs; read from global memory once) and folded by
// the block's threads as a tree; the block size follows from the row length (scheduler/row_kernel.h). SwiGLU
// has no statistic: its output is elementwise. Softmax and SwiGLU compute exp with approximate math.
Schedule schedule_norm(const Norm &n);

// The bytes the op must move: every input read once and every output written once, for `rows` rows.
double norm_bytes(const Norm &n, int64_t rows);

}  // namespace twist::apps
