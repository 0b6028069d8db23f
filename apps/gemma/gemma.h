#pragma once
// The kernels of a Gemma 4 text decoder layer as twist programs (apps/gemma/README.md says where each number
// and each step comes from). A layer, as transformers' Gemma4TextDecoderLayer computes it, on rows of tokens:
//   y      = input_layernorm(h)                                   (the previous residual_norm's second
//   output) qkv    = y Wqkv                                               one GEMM, q, k (and v) side by side
//   q      = rope(q_norm(q)), k = rope(k_norm(k)), v = v_norm(v)  head_norm: per head, written [B, H, S, D]
//   a      = attention(q, k, v), causal, sliding or full, GQA     apps/attention with scaling 1
//   h, y   = h + post_attention_norm(a Wo), pre_feedforward_norm(h)   residual_norm: one row kernel, two
//   outputs g      = gelu_tanh(y Wgate) * (y Wup)                         gated_up: one GEMM, the gate in its
//   epilogue h, y   = (h + post_feedforward_norm(g Wdown)) layer_scalar, the next layer's input_layernorm(h)
// Every norm is Gemma 4's RMSNorm: x (mean(x^2) + eps)^(-1/2) w, in f32, rounded to the storage type (its
// weight multiplies as it is, not as 1 + w as in Gemma 1 to 3).
#include <optional>
#include <string>
#include <vector>

#include "apps/attention/attention.h"
#include "apps/gemm/gemm.h"
#include "apps/gemm/gemm_rule.h"
#include "lang/twist.h"
#include "scheduler/schedule.h"

namespace twist::apps::gemma {

// The text configuration's numbers that shape the kernels.
struct Config {
  std::string name;
  int hidden = 0, intermediate = 0, heads = 0;
  int kv_heads = 0, head_dim = 0;                // sliding-window layers
  int global_kv_heads = 0, global_head_dim = 0;  // full-attention layers
  bool global_values_from_keys = false;          // attention_k_eq_v: full layers' values are k_proj's output
  int sliding_window = 0;
  float eps = 1e-6f;
};

// google/gemma-4-31B's text_config, the largest published Gemma 4 text configuration whose every kernel
// dimension could be cited (README.md).
Config gemma4_31b();
// The same structure at sizes the CPU interpreter runs in seconds: GQA in both layer types, values from keys
// in the full layers, a window shorter than the tests' sequences.
Config gemma4_tiny();
// The configuration named `name` ("31b", "tiny"), or nothing.
std::optional<Config> config_by_name(const std::string &name);

enum class LayerType { sliding, full };
const char *to_string(LayerType t);
std::optional<LayerType> parse_layer_type(const std::string &name);

// What the layer type changes in attention.
struct LayerAttention {
  int kv_heads = 0, head_dim = 0;
  std::optional<int> window;  // sliding layers: keys j with i - j < window
  bool values_from_keys = false;
  // The columns of the fused projection: q heads, k heads, then v heads unless the values are the keys.
  int qkv_columns(int heads) const { return (heads + kv_heads * (values_from_keys ? 1 : 2)) * head_dim; }
  int k_first_column(int heads) const { return heads * head_dim; }
  int v_first_column(int heads) const {
    return values_from_keys ? k_first_column(heads) : (heads + kv_heads) * head_dim;
  }
};
LayerAttention layer_attention(const Config &c, LayerType t);

// --- the programs ------------------------------------------------------------------------------------------

// gelu_tanh(x Wgate) * (x Wup) as ONE GEMM over the gate and up weights interleaved column by column,
// W[:, 2j] = Wgate[:, j] and W[:, 2j + 1] = Wup[:, j] ([hidden, 2 intermediate]), on the tensor cores, with
// the gated activation over each pair of columns in its epilogue, each rounded to the storage type first as
// PyTorch's two projections store them. The interleaving is what makes the epilogue fuse: the accumulator
// layouts of mma.m16n8k16 and wgmma give each thread columns 2c and 2c + 1 together, so the pair of output
// column j is in one thread's registers and only [M, intermediate] is stored.
struct GatedUp {
  Type dtype;
  int hidden, intermediate;
  Gemm gemm;  // A = x [M, hidden], B = the interleaved weights; gemm.C, its f32 sums, [M, 2 intermediate]
              // (never stored: the epilogue reads them in registers)
  Func out;   // [M, intermediate]
};
GatedUp make_gated_up(Type dtype, int hidden, int intermediate, const std::string &prefix = "");

// Per-head RMSNorm of one of the fused projection's groups of heads, with RoPE (q and k) or without a weight
// (v), read from the projection's output viewed as [B, S, columns / D, D] (so that a row of the input is one
// head, and a block reads its head only) at head first_column / D + h, and written
// transposed, [B, heads, S, D], as attention reads it. RoPE is transformers' rotate-half form over cos and
// sin of [B, S, D] as its rotary embedding gives them, so the rope type (default, proportional with a partial
// rotary factor) is in the tables, not in the program.
struct HeadNormOptions {
  Type dtype = bf16;
  int heads = 1, head_dim = 64;
  int columns = 64, first_column = 0;
  bool weight = true;  // q_norm and k_norm have one; v_norm does not
  bool rope = true;
  float eps = 1e-6f;
  std::string prefix = "";
};
struct HeadNorm {
  HeadNormOptions options;
  SizeParam batch, seq;
  Input x;
  std::optional<Input> w, cos, sin;
  Var b, h, s, d;
  RDom r;
  Func ss, out;
};
HeadNorm make_head_norm(const HeadNormOptions &options);

// The projection and the three head norms of a layer as ONE program, the form whose norms are computed in
// the projection's epilogue. The projection per head: C(g, i, d) = sum over k of y(i, k) Wqkv(k, g D + d),
// the f32 sums of head g's columns (q's, then k's (and v's) side by side in Wqkv, [hidden, columns]), rounded
// to the storage type as PyTorch stores the projection; then per head what make_head_norm computes for q and
// k (weight and RoPE) and for v (neither), written out [heads + 2 kv_heads, B*S, D]: q's heads, then k's,
// then v's (a full layer's v heads are k's columns), attention's [B, H, S, D] at B 1. A head's norm folds
// C over its last dimension and RoPE reads it at (d + D/2) % D: where the projection's wgmma atom is one head
// wide, both are in one thread quad's registers, and the norms are the GEMM's epilogue (row folds,
// scheduler/realization.h), one kernel storing only the output.
struct QkvNormRope {
  Type dtype;
  int heads, kv_heads, head_dim;
  bool values_from_keys;
  float eps;
  std::string prefix;
  SizeParam rows, hidden;          // rows = B * S
  Input y, w, q_w, k_w, cos, sin;  // y [rows, hidden], w = Wqkv; q_norm's and k_norm's weights [D];
                                   // the rotary tables as [rows, D]
  RDom k, r;
  Var g, i, d;      // named as the batched GEMM schedule's loops: "b", "i", "j"
  Func C, ss, out;  // C [heads + kv_heads (+ kv_heads), rows, D]; ss(g, i): head g's sum of squares at row i
};
QkvNormRope make_qkv_norm_rope(const Config &c, LayerType t, const std::string &prefix = "");
// Whether `plan` tiles the per-head projection so that its norms fold in its epilogue: a Hopper plan whose
// block (one wgmma atom a warpgroup) is one head wide, without split or stream-K.
bool qkv_norms_fuse(const QkvNormRope &n, const GemmPlan &plan);

// The sublayer's output x normalized and added to the residual stream, then that stream normalized for the
// next sublayer, in one row kernel with two outputs:
//   h = (residual + rmsnorm(x, w_post)) layer_scalar,  y = rmsnorm(h, w_next)
// layer_scalar (a scalar of the program) is 1 after attention and the layer's layer_scalar after the MLP,
// where y is the next layer's input_layernorm (or the model's final norm).
struct ResidualNorm {
  Type dtype;
  int hidden;
  float eps;
  std::string prefix;
  SizeParam rows;
  Input x, residual, w_post, w_next;
  Param<float> layer_scalar;
  Var i, j;
  Func ss_x, ss_h, h, out;
};
ResidualNorm make_residual_norm(Type dtype, int hidden, float eps, const std::string &prefix = "");

// Gemma 4's attention: causal, GQA, the layer type's head dim and window, scores scaled by 1 (q_norm has
// normalized the queries): qk_scale = log2(e).
Attention make_layer_attention(const Config &c, LayerType t, bool decode, const std::string &prefix = "");
double qk_scale();

// --- the schedules: every kernel's schedule is chosen here, so a better one is a change of one line --------

GemmPlan projection_plan(int64_t m, int64_t n, int64_t k);
// The gated up-projection's GEMM tiled by `plan` (by the projections' rule: projection_plan(rows, 2I,
// hidden)).
Schedule schedule_gated_up(const GatedUp &g, const GemmPlan &plan);
Schedule schedule_head_norm(const HeadNorm &n);
// The per-head projection tiled by `plan` (batched over heads); its norms in its epilogue where the plan
// allows (qkv_norms_fuse), else the sums a stage of their own and the norms one row kernel.
Schedule schedule_qkv_norm_rope(const QkvNormRope &n, const GemmPlan &plan);
Schedule schedule_residual_norm(const ResidualNorm &n);
// A layer's attention problem: `batch` sequences of `queries` new tokens (1 when decoding) over `keys` keys,
// with `heads` query heads.
struct LayerAttentionShape {
  int64_t batch = 1, heads = 1, queries = 1, keys = 1;
};
// The library's tilings by rule for the layer's attention (`a`'s head dimension, group, mask and dtype): the
// Hopper datapath at prefill (apps::hopper_attention_tiling: D 256 on 64-key tiles, D 512 with its columns
// over two warpgroups) and split-KV decoding (apps::decode_tiling).
AttentionTiling attention_tiling(const Attention &a, const LayerAttentionShape &shape);
Schedule schedule_layer_attention(const Attention &a, const LayerAttentionShape &shape);

}  // namespace twist::apps::gemma
