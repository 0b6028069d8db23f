#include "apps/gemma/gemma.h"

#include <cmath>

#include "algebra/builtins.h"
#include "lang/error.h"

namespace twist::apps::gemma {

Config gemma4_31b() {
  return {.name = "31b",
          .hidden = 5376,
          .intermediate = 21504,
          .heads = 32,
          .kv_heads = 16,
          .head_dim = 256,
          .global_kv_heads = 4,
          .global_head_dim = 512,
          .global_values_from_keys = true,
          .sliding_window = 1024,
          .eps = 1e-6f};
}

Config gemma4_tiny() {
  return {.name = "tiny",
          .hidden = 48,
          .intermediate = 40,
          .heads = 4,
          .kv_heads = 2,
          .head_dim = 16,
          .global_kv_heads = 1,
          .global_head_dim = 32,
          .global_values_from_keys = true,
          .sliding_window = 5,
          .eps = 1e-6f};
}

std::optional<Config> config_by_name(const std::string &name) {
  for (const Config &c : {gemma4_31b(), gemma4_tiny()})
    if (c.name == name) return c;
  return std::nullopt;
}

const char *to_string(LayerType t) {
  return t == LayerType::sliding ? "sliding" : "full";
}

std::optional<LayerType> parse_layer_type(const std::string &name) {
  if (name == "sliding") return LayerType::sliding;
  if (name == "full") return LayerType::full;
  return std::nullopt;
}

LayerAttention layer_attention(const Config &c, LayerType t) {
  if (t == LayerType::sliding) return {c.kv_heads, c.head_dim, c.sliding_window, false};
  return {c.global_kv_heads, c.global_head_dim, std::nullopt, c.global_values_from_keys};
}

namespace {

Expr f32_of(const Expr &e) {
  return cast(f32, e);
}

}  // namespace

GatedUp make_gated_up(Type dtype, int hidden, int intermediate, const std::string &p) {
  GatedUp g{dtype, hidden, intermediate, make_gemm({.input = dtype, .output = dtype, .prefix = p}),
            Func(p + "gated")};
  Var i("i"), j("j");
  auto stored = [&](const Expr &column) { return f32_of(cast(dtype, g.gemm.C(i, column))); };
  g.out(i, j) = cast(dtype, gelu_tanh(stored(2 * j)) * stored(2 * j + 1));
  g.out.set_shape({g.gemm.M, Expr(intermediate)});
  return g;
}

HeadNorm make_head_norm(const HeadNormOptions &o) {
  const std::string &p = o.prefix;
  const int D = o.head_dim;
  if (o.columns % D != 0 || o.first_column % D != 0)
    fail(
        "head norm {}: the projection's {} columns and the group's first column {} must be whole heads of {}",
        p, o.columns, o.first_column, D);
  SizeParam batch(p + "B"), seq(p + "S");
  HeadNorm n{o,
             batch,
             seq,
             Input(p + "x", o.dtype, {batch, seq, Expr(o.columns / D), Expr(D)}),
             std::nullopt,
             std::nullopt,
             std::nullopt,
             Var("b"),
             Var("h"),
             Var("s"),
             Var("d"),
             RDom({{0, D}}, p + "r"),
             Func(p + "ss"),
             Func(p + "out")};
  if (o.weight) n.w.emplace(p + "w", o.dtype, std::vector<Expr>{Expr(D)});
  if (o.rope) {
    n.cos.emplace(p + "cos", o.dtype, std::vector<Expr>{batch, seq, Expr(D)});
    n.sin.emplace(p + "sin", o.dtype, std::vector<Expr>{batch, seq, Expr(D)});
  }
  const Var &b = n.b, &h = n.h, &s = n.s, &d = n.d;
  auto element = [&](const Expr &e) { return f32_of(n.x(b, s, o.first_column / D + h, e)); };
  n.ss(b, h, s) = reduce(algebra::sum(f32), n.r, element(n.r.x) * element(n.r.x));
  // The normalized head, rounded to the storage type as the norm's module returns it.
  auto normalized = [&](const Expr &e) {
    Expr v = element(e) * rsqrt(n.ss(b, h, s) / float(D) + o.eps);
    if (n.w) v = v * f32_of((*n.w)(e));
    return f32_of(cast(o.dtype, v));
  };
  Expr value = normalized(d);
  if (o.rope) {
    // rotate_half: the first half of the head takes minus the second half, the second half the first.
    const int half = D / 2;
    const Expr partner = normalized((d + half) % D);
    const Expr rotated = select(d < half, -partner, partner);
    value = value * f32_of((*n.cos)(b, s, d)) + rotated * f32_of((*n.sin)(b, s, d));
  }
  n.out(b, h, s, d) = cast(o.dtype, value);
  n.out.set_shape({batch, Expr(o.heads), seq, Expr(D)});
  return n;
}

QkvNormRope make_qkv_norm_rope(const Config &c, LayerType t, const std::string &p) {
  const LayerAttention la = layer_attention(c, t);
  const int H = c.heads, KV = la.kv_heads, D = la.head_dim;
  const Type dtype = bf16;
  SizeParam rows(p + "rows"), hidden(p + "hidden");
  QkvNormRope n{dtype,
                H,
                KV,
                D,
                la.values_from_keys,
                c.eps,
                p,
                rows,
                hidden,
                Input(p + "A", dtype, {rows, hidden}),  // named as the GEMM schedule's staged inputs
                Input(p + "B", dtype, {hidden, Expr(la.qkv_columns(H))}),
                Input(p + "q_w", dtype, {Expr(D)}),
                Input(p + "k_w", dtype, {Expr(D)}),
                Input(p + "cos", dtype, {rows, Expr(D)}),
                Input(p + "sin", dtype, {rows, Expr(D)}),
                RDom({{0, hidden}}, p + "k"),
                RDom({{0, D}}, p + "r"),
                Var("b"),
                Var("i"),
                Var("j"),
                Func(p + "C"),
                Func(p + "ss"),
                Func(p + "out")};
  const Var &g = n.g, &i = n.i, &d = n.d;
  n.C(g, i, d) = reduce(algebra::sum(f32), n.k, f32_of(n.y(i, n.k.x)) * f32_of(n.w(n.k.x, g * D + d)));
  n.C.set_shape({Expr(la.qkv_columns(H) / D), rows, Expr(D)});  // to evaluate it alone
  // The projection as PyTorch stores it.
  auto projected = [&](const Expr &head, const Expr &e) { return f32_of(cast(dtype, n.C(head, i, e))); };
  n.ss(g, i) = reduce(algebra::sum(f32), n.r, projected(g, n.r.x) * projected(g, n.r.x));
  // Output head h = g: q's heads are the first H, k's the next KV, and v's the KV from v_first_column on
  // (k's own where the values are the keys).
  const Var &h = g;
  const Expr is_q = h < H, is_k = h >= H && h < H + KV;
  const int v_shift = H + KV - la.v_first_column(H) / D;  // KV where the values are the keys, else 0
  // (max_of only tells bounds inference what the select does: a v head's group is never below H.)
  const Expr head = v_shift == 0 ? Expr(h) : max_of(h - select(h < H + KV, 0, v_shift), 0);
  // The normalized head, rounded to the storage type as the norm's module returns it; v_norm has no weight.
  auto normalized = [&](const Expr &e) {
    const Expr v = projected(head, e) * rsqrt(n.ss(head, i) / float(D) + c.eps);
    const Expr weight = select(is_q, f32_of(n.q_w(e)), f32_of(n.k_w(e)));
    return f32_of(cast(dtype, select(is_q || is_k, v * weight, v)));
  };
  // rotate_half, on q and k only: the first half of the head takes minus the second half, the second half
  // the first.
  const int half = D / 2;
  const Expr partner = normalized((d + half) % D);
  const Expr rotated = select(d < half, -partner, partner);
  const Expr roped = normalized(d) * f32_of(n.cos(i, d)) + rotated * f32_of(n.sin(i, d));
  n.out(h, i, d) = cast(dtype, select(is_q || is_k, roped, normalized(d)));
  n.out.set_shape({Expr(H + 2 * KV), rows, Expr(D)});
  return n;
}

ResidualNorm make_residual_norm(Type dtype, int hidden, float eps, const std::string &p) {
  SizeParam rows(p + "rows");
  const Expr H(hidden);
  ResidualNorm n{dtype,
                 hidden,
                 eps,
                 p,
                 rows,
                 Input(p + "x", dtype, {rows, H}),
                 Input(p + "residual", dtype, {rows, H}),
                 Input(p + "w_post", dtype, {H}),
                 Input(p + "w_next", dtype, {H}),
                 Param<float>(p + "layer_scalar"),
                 Var("i"),
                 Var("j"),
                 Func(p + "ss_x"),
                 Func(p + "ss_h"),
                 Func(p + "h"),
                 Func(p + "out")};
  const Var &i = n.i, &j = n.j;
  RDom rx({{0, H}}, p + "rx"), rh({{0, H}}, p + "rh");
  n.ss_x(i) = reduce(algebra::sum(f32), rx, f32_of(n.x(i, rx.x)) * f32_of(n.x(i, rx.x)));
  // Each step rounded to the storage type where the model's bf16 tensors are: the norm's output, the sum
  // with the residual, the product with layer_scalar.
  const Expr post =
      f32_of(cast(dtype, f32_of(n.x(i, j)) * rsqrt(n.ss_x(i) / float(hidden) + eps) * f32_of(n.w_post(j))));
  n.h(i, j) = cast(dtype, f32_of(cast(dtype, f32_of(n.residual(i, j)) + post)) * n.layer_scalar);
  n.ss_h(i) = reduce(algebra::sum(f32), rh, f32_of(n.h(i, rh.x)) * f32_of(n.h(i, rh.x)));
  n.out(i, j) = {n.h(i, j), cast(dtype, f32_of(n.h(i, j)) * rsqrt(n.ss_h(i) / float(hidden) + eps) *
                                            f32_of(n.w_next(j)))};
  n.out.set_shape({rows, H});
  return n;
}

double qk_scale() {
  return std::log2(std::exp(1.0));
}

Attention make_layer_attention(const Config &c, LayerType t, bool decode, const std::string &prefix) {
  const LayerAttention la = layer_attention(c, t);
  return make_attention({.dtype = bf16,
                         .head_dim = la.head_dim,
                         .group = c.heads / la.kv_heads,
                         .causal = true,
                         .window = la.window,
                         .decode = decode,
                         .prefix = prefix});
}

}  // namespace twist::apps::gemma
