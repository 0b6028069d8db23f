// Tutorial 1: secretly associative operations.
//
// Safe softmax, Welford's variance and attention look like loops that must run in order: each step
// rescales what came before. They are one operation in three costumes: a plain sum (and, for softmax and
// attention, a max) of per-element terms, kept relative to a reference value. Written as a twist of that
// plain sum, their combines are derived, not written, and associative by construction, which is what
// lets a schedule tile, tree-reduce and split them. The notes are in 01_secretly_associative.md.
//
// The program checks what it shows and returns non-zero if a verdict is not the expected one.
#include <cstdio>

#include "algebra/builtins.h"
#include "algebra/check.h"
#include "algebra/relative_form.h"
#include "algebra/twist.h"
#include "lang/twist.h"

using namespace twist;
using namespace twist::algebra;

namespace {

// exp(m - r), where a state that holds no element (m == -inf) contributes 0 even when r == -inf too.
Expr rescale(const Expr &m, const Expr &r) {
  return select(m == neg_infinity(m.type()), 0, exp(m - r));
}

// Softmax and attention: the running max m, and sums of exp(s - m) (times v for attention). Relative to a
// reference r, every sum is multiplied by exp(m - r); the base is (max, +, +, ...), and the combine takes
// r = max(a.m, b.m), so that no exp of a positive number is ever computed.
Monoid sums_relative_to_max(const std::string &name, int width) {
  std::vector<Component> state{{"m", f32}, {"l", f32}}, elements{{"s", f32}};
  std::vector<Monoid> base{max(f32), sum(f32)};
  std::vector<std::string> base_names{"m", "l"};
  std::vector<Expr> identity{neg_infinity(f32), Expr(0.0f)};
  for (int k = 0; k < width; ++k) {
    state.push_back({fmt::format("o{}", k), f32});
    elements.push_back({fmt::format("v{}", k), f32});
    base.push_back(sum(f32));
    base_names.push_back(fmt::format("o{}", k));
    identity.push_back(Expr(0.0f));
  }
  return TwistBuilder(name, product(base, base_names))
      .state(state)
      .elements(elements)
      .identity(identity)
      .lift([](const State &x) {
        // A masked score (-inf) lifts to nothing: l = 0 and o = 0.
        const Expr live = select(x["s"] == neg_infinity(f32), 0.0f, 1.0f);
        std::vector<Expr> s{x["s"], live};
        for (int k = 1; k < x.size(); ++k) s.push_back(x[k] * live);
        return s;
      })
      .reference(f32, [](const State &a, const State &b) { return max(a["m"], b["m"]); })
      .to_base([](const State &s, const Expr &r) {
        std::vector<Expr> b{s["m"]};
        for (int k = 1; k < s.size(); ++k) b.push_back(s[k] * rescale(s["m"], r));
        return b;
      })
      .from_base([](const State &b, const Expr &r) {
        std::vector<Expr> s{b["m"]};
        for (int k = 1; k < b.size(); ++k)
          s.push_back(select(b["m"] == neg_infinity(f32), 0, b[k] * exp(r - b["m"])));
        return s;
      })
      .build();
}

// Welford: the count n, the mean and M2 = sum (x - mean)^2. Relative to a reference r they are the power
// sums of the deviations, n, sum (x - r) and sum (x - r)^2, all plain sums; the combine takes r = a.mean.
Monoid welford_as_power_sums() {
  return TwistBuilder("welford", product({sum(f64), sum(f64), sum(f64)}, {"n", "s1", "s2"}))
      .state({{"n", f64}, {"mean", f64}, {"M2", f64}})
      .elements({{"x", f64}})
      .identity({0.0, 0.0, 0.0})
      .lift([](const State &x) {
        return std::vector<Expr>{Expr(1.0), x["x"], Expr(0.0)};
      })
      .reference(f64, [](const State &a, const State &) { return a["mean"]; })
      .to_base([](const State &s, const Expr &r) {
        const Expr d = s["mean"] - r;
        return std::vector<Expr>{s["n"], s["n"] * d, s["M2"] + s["n"] * d * d};
      })
      .from_base([](const State &b, const Expr &r) {
        const Expr empty = b["n"] == 0;
        return std::vector<Expr>{b["n"], select(empty, 0, r + b["s1"] / b["n"]),
                                 select(empty, 0, b["s2"] - b["s1"] * b["s1"] / b["n"])};
      })
      .build();
}

// The look-alike: online softmax written by hand, forgetting to rescale the right operand's sum.
Monoid softmax_look_alike() {
  return MonoidBuilder("softmax_look_alike")
      .state({{"m", f32}, {"l", f32}})
      .elements({{"s", f32}})
      .identity({neg_infinity(f32), Expr(0.0f)})
      .lift([](const State &x) {
        return std::vector<Expr>{x["s"], select(x["s"] == neg_infinity(f32), 0.0f, 1.0f)};
      })
      .combine([](const State &a, const State &b) {
        const Expr m = max(a["m"], b["m"]);
        return std::vector<Expr>{m, a["l"] * rescale(a["m"], m) + b["l"]};
      })
      .build();
}

void print_combine(const Monoid &m) {
  std::printf("\n%s: the derived combine\n", m.name.c_str());
  for (size_t k = 0; k < m.state.size(); ++k)
    std::printf("  %s = %s\n", m.state[k].name.c_str(), fmt::format("{}", m.combine[k]).c_str());
}

}  // namespace

int main() {
  int unexpected = 0;
  auto expect = [&](bool ok, const char *what) {
    if (!ok) {
      std::printf("UNEXPECTED: %s\n", what);
      ++unexpected;
    }
  };

  // Three combines, one construction.
  const Monoid softmax = sums_relative_to_max("safe_softmax", 0);
  const Monoid attention = sums_relative_to_max("attention", 2);
  const Monoid welford = welford_as_power_sums();
  for (const Monoid *m : {&softmax, &attention, &welford}) {
    print_combine(*m);
    const Verdict v = check_associativity(*m);
    std::printf("%s\n", v.to_string().c_str());
    expect(v.accepted && v.level == Level::construction,
           "a twist of a plain sum is associative by construction");
  }

  // What the lowering keeps inside a tile: attention's contributions relative to the reference are
  // exp(s - ref) * v, a contraction.
  const auto form = relative_form(attention);
  expect(form.has_value(), "attention has a relative form");
  if (form) {
    std::printf("\nattention inside a tile, relative to ref:\n");
    for (size_t k = 0; k < form->base.size(); ++k)
      std::printf("  %s: %s, contribution %s\n", form->base[k].name.c_str(),
                  form->is_selector(static_cast<int>(k)) ? "selector (max)" : "additive (+)",
                  fmt::format("{}", form->relative_lift[k]).c_str());
  }

  // The look-alike is refused, with a counterexample.
  const Verdict refused = check_associativity(softmax_look_alike());
  std::printf("\n%s\n", refused.to_string().c_str());
  expect(!refused.accepted && refused.counterexample.has_value(),
         "the look-alike is refused with a counterexample");

  if (unexpected) std::printf("\n%d unexpected verdict(s)\n", unexpected);
  return unexpected == 0 ? 0 : 1;
}
