#include "scheduler/linear_sums.h"

#include <functional>
#include <vector>

#include "lang/error.h"
#include "lang/expr.h"

namespace twist {

using namespace Halide::Internal;

namespace {

// Terms and their coefficients, in first-seen order (so that the rebuilt sum reads like the original).
struct LinearSum {
  std::vector<std::pair<Halide::Expr, int64_t>> terms;
  int64_t constant = 0;

  void add_term(const Halide::Expr &t, int64_t coefficient) {
    for (auto &[term, c] : terms)
      if (equal(term, t)) {
        c += coefficient;
        return;
      }
    terms.push_back({t, coefficient});
  }
  void add(const LinearSum &o, int64_t scale) {
    constant += o.constant * scale;
    for (const auto &[t, c] : o.terms) add_term(t, c * scale);
  }
};

LinearSum collect(const Halide::Expr &e) {
  LinearSum s;
  if (const auto *i = as_const_int(e)) {
    s.constant = *i;
  } else if (const auto *a = e.as<Add>()) {
    s.add(collect(a->a), 1);
    s.add(collect(a->b), 1);
  } else if (const auto *d = e.as<Sub>()) {
    s.add(collect(d->a), 1);
    s.add(collect(d->b), -1);
  } else if (const auto *m = e.as<Mul>(); m && as_const_int(m->b)) {
    s.add(collect(m->a), *as_const_int(m->b));
  } else if (const auto *m = e.as<Mul>(); m && as_const_int(m->a)) {
    s.add(collect(m->b), *as_const_int(m->a));
  } else {
    s.add_term(e, 1);
  }
  return s;
}

// The sum of `terms` (those `pick` accepts) and `constant`, as written by canonical_sum.
Halide::Expr rebuild(const LinearSum &s, int64_t constant,
                     const std::function<bool(const Halide::Expr &)> &pick) {
  Halide::Expr sum;
  for (const auto &[t, c] : s.terms) {
    if (c == 0 || !pick(t)) continue;
    const Halide::Expr term = c == 1 ? t : t * static_cast<int>(c);
    sum = sum.defined() ? sum + term : term;
  }
  const Halide::Expr k = static_cast<int>(constant);
  if (!sum.defined()) return k;
  return constant == 0 ? sum : sum + k;
}

}  // namespace

Halide::Expr canonical_sum(const Halide::Expr &e) {
  if (!e.type().is_int() || e.type().bits() != 32) return e;
  const LinearSum s = collect(e);
  return rebuild(s, s.constant, [](const Halide::Expr &) { return true; });
}

SplitSum split_sum(const Halide::Expr &e, const std::function<bool(const Halide::Expr &term)> &keep) {
  TWIST_CHECK(e.type() == Halide::Int(32), "split_sum of {}, which is not a 32-bit integer", e);
  const LinearSum s = collect(e);
  return {rebuild(s, s.constant, keep), rebuild(s, 0, [&](const Halide::Expr &t) { return !keep(t); })};
}

}  // namespace twist
