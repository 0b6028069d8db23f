#include "apps/norms/norms.h"

#include "algebra/builtins.h"
#include "algebra/online.h"
#include "lang/error.h"

namespace twist::apps {

const char *to_string(NormKind k) {
  switch (k) {
    case NormKind::softmax:
      return "softmax";
    case NormKind::layernorm:
      return "layernorm";
    case NormKind::rmsnorm:
      return "rmsnorm";
    case NormKind::add_rmsnorm:
      return "add_rmsnorm";
    case NormKind::swiglu:
      return "swiglu";
  }
  return "?";
}

const char *to_string(LayerNormStatistics s) {
  switch (s) {
    case LayerNormStatistics::two_pass:
      return "two_pass";
    case LayerNormStatistics::welford:
      return "welford";
    case LayerNormStatistics::shifted_sums:
      return "shifted_sums";
  }
  return "?";
}

std::optional<LayerNormStatistics> parse_layernorm_statistics(const std::string &name) {
  for (LayerNormStatistics s :
       {LayerNormStatistics::two_pass, LayerNormStatistics::welford, LayerNormStatistics::shifted_sums})
    if (name == to_string(s)) return s;
  return std::nullopt;
}

std::vector<NormKind> all_norm_kinds() {
  return {NormKind::softmax, NormKind::layernorm, NormKind::rmsnorm, NormKind::add_rmsnorm, NormKind::swiglu};
}

std::optional<NormKind> parse_norm_kind(const std::string &name) {
  for (NormKind k : all_norm_kinds())
    if (name == to_string(k)) return k;
  return std::nullopt;
}

Norm make_norm(NormKind kind, const NormOptions &o) {
  const std::string p = o.prefix;
  const Type t = o.dtype;
  const Expr hidden(o.hidden);
  Norm n{kind, o,  SizeParam(p + "rows"),    {}, Var("i"), Var("j"), RDom({{0, hidden}}, p + "r"),
         {},   {}, Func(p + to_string(kind))};
  const Var &i = n.i, &j = n.j;
  const RDom &r = n.r;
  const float eps = o.eps;
  auto f32_of = [](const Expr &e) { return cast(f32, e); };
  if (kind == NormKind::swiglu) {
    const Input x(p + "x", t, {n.rows, Expr(2 * o.hidden)});
    n.inputs = {x};
    const Expr gate = f32_of(x(i, j)), up = f32_of(x(i, j + o.hidden));
    n.out(i, j) = cast(t, gate / (1.0f + exp(-gate)) * up);
    n.out.set_shape({n.rows, hidden});
    return n;
  }
  const Input x(p + "x", t, {n.rows, hidden});
  n.inputs = {x};
  switch (kind) {
    case NormKind::softmax: {
      // The row is in shared memory, so two passes (max, then the sum of exponentials) cost one exp per
      // element where the online softmax monoid's combine costs two.
      Func peak(p + "softmax_max"), e(p + "softmax_exp"), total(p + "softmax_sum");
      RDom q({{0, hidden}}, p + "q");
      peak(i) = reduce(algebra::max(f32), r, f32_of(x(i, r.x)));
      e(i, j) = exp(f32_of(x(i, j)) - peak(i));
      total(i) = reduce(algebra::sum(f32), q, e(i, q.x));
      // One reciprocal per row, then a multiply per element, where a division per element costs about ten
      // instructions: the row is read from registers at the memory's pace only if the arithmetic keeps up.
      n.out(i, j) = cast(t, e(i, j) * (1.0f / total(i)));
      n.reductions = {peak, total};
      n.inlined = {e};
      break;
    }
    case NormKind::layernorm: {
      const Input w(p + "w", t, {hidden}), b(p + "b", t, {hidden});
      n.inputs.push_back(w);
      n.inputs.push_back(b);
      const auto normalized = [&](const Expr &mean, const Expr &variance) {
        return cast(t, (f32_of(x(i, j)) - mean) * rsqrt(variance + eps) * f32_of(w(j)) + f32_of(b(j)));
      };
      if (o.layernorm == LayerNormStatistics::welford) {
        Func stats(p + "layernorm_stats");
        stats(i) = reduce(algebra::welford(f32), r, f32_of(x(i, r.x)));
        n.out(i, j) = normalized(stats(i)[0], stats(i)[1]);
        n.reductions = {stats};
        break;
      }
      if (o.layernorm == LayerNormStatistics::shifted_sums) {
        Func sums(p + "layernorm_sums");
        const Expr shift = f32_of(x(i, 0));
        const Expr d = f32_of(x(i, r.x)) - shift;
        sums(i) =
            reduce(algebra::product({algebra::sum(f32), algebra::sum(f32)}, {"s1", "s2"}), r, {d, d * d});
        const Expr mean_shift = sums(i)[0] / float(o.hidden);
        n.out(i, j) = normalized(shift + mean_shift, sums(i)[1] / float(o.hidden) - mean_shift * mean_shift);
        n.reductions = {sums};
        break;
      }
      Func total(p + "layernorm_sum"), deviations(p + "layernorm_m2");
      RDom q({{0, hidden}}, p + "q");
      total(i) = reduce(algebra::sum(f32), r, f32_of(x(i, r.x)));
      const Expr mean = total(i) / float(o.hidden);
      deviations(i) = reduce(algebra::sum(f32), q, (f32_of(x(i, q.x)) - mean) * (f32_of(x(i, q.x)) - mean));
      n.out(i, j) = normalized(mean, deviations(i) / float(o.hidden));
      n.reductions = {total, deviations};
      break;
    }
    case NormKind::rmsnorm: {
      const Input w(p + "w", t, {hidden});
      n.inputs.push_back(w);
      Func ss(p + "ss");
      ss(i) = reduce(algebra::sum(f32), r, f32_of(x(i, r.x)) * f32_of(x(i, r.x)));
      n.out(i, j) = cast(t, f32_of(x(i, j)) * rsqrt(ss(i) / float(o.hidden) + eps) * f32_of(w(j)));
      n.reductions = {ss};
      break;
    }
    case NormKind::add_rmsnorm: {
      const Input residual(p + "residual", t, {n.rows, hidden}), w(p + "w", t, {hidden});
      n.inputs.push_back(residual);
      n.inputs.push_back(w);
      // The residual stream is rounded to the storage type before it is normalized, as it is stored.
      Func h(p + "h"), ss(p + "ss");
      h(i, j) = cast(t, f32_of(x(i, j)) + f32_of(residual(i, j)));
      ss(i) = reduce(algebra::sum(f32), r, f32_of(h(i, r.x)) * f32_of(h(i, r.x)));
      n.out(i, j) = {h(i, j), cast(t, f32_of(h(i, j)) * rsqrt(ss(i) / float(o.hidden) + eps) * f32_of(w(j)))};
      n.reductions = {ss};
      n.inlined = {h};
      break;
    }
    case NormKind::swiglu:
      break;
  }
  n.out.set_shape({n.rows, hidden});
  return n;
}

Schedule schedule_norm(const Norm &n) {
  Schedule s;
  for (const Func &f : n.reductions) s[f].compute_at(n.out, n.i);
  // Softmax and SwiGLU take an exp per element (softmax two): on the special-function unit (__expf), as
  // torch.compile's Triton kernels do, or the arithmetic and not the memory sets their pace.
  if (n.kind == NormKind::softmax || n.kind == NormKind::swiglu) s[n.out].approximate_math();
  return s;
}

double norm_bytes(const Norm &n, int64_t rows) {
  const double element = n.options.dtype.bytes(), hidden = n.options.hidden;
  double bytes = 0;
  for (const Input &in : n.inputs) bytes += in.shape().size() == 1 ? hidden * element : 0;
  const double row_inputs = n.kind == NormKind::swiglu ? 2 : n.kind == NormKind::add_rmsnorm ? 2 : 1;
  const double outputs = n.kind == NormKind::add_rmsnorm ? 2 : 1;
  return bytes + static_cast<double>(rows) * hidden * element * (row_inputs + outputs);
}

}  // namespace twist::apps
