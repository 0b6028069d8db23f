#include "algebra/online.h"

#include <functional>

#include "algebra/builtins.h"
#include "algebra/provenance.h"
#include "algebra/twist.h"
#include "lang/error.h"

namespace twist::algebra {

using namespace detail;

namespace {

// The built-in m, registered as the library's, carrying the twist that explains it and its reference rule.
Monoid with_twist_of(Monoid m, const Monoid &twisted,
                     const std::function<Expr(const State &, const State &)> &rule) {
  m.twist = twisted.twist;
  register_reference_rule(m, ReferenceRule{m.state[0].type, rule(m.lhs(), m.rhs())});
  return register_library_monoid(m);
}

// ---- softmax, log-sum-exp and attention: a running max and sums scaled by exp(s - max) ----

enum class RescaledOutputs { state, log_sum_exp, normalized };

struct RescaledSums {
  std::string name;
  Type t;
  int width;  // the number of o components (attention's value width); 0 for softmax and log-sum-exp
  RescaledOutputs outputs;

  std::vector<Component> state() const {
    std::vector<Component> c{{"m", t}, {"l", t}};
    for (int k = 0; k < width; ++k) c.push_back({fmt::format("o_{}", k), t});
    return c;
  }
  std::vector<Component> elements() const {
    std::vector<Component> c{{"s", t}};
    for (int k = 0; k < width; ++k) c.push_back({fmt::format("v_{}", k), t});
    return c;
  }
  std::vector<Expr> identity() const {
    std::vector<Expr> e{neg_infinity(t)};
    for (int k = 0; k <= width; ++k) e.push_back(additive_identity(t));
    return e;
  }
  // A masked element (s == -inf) lifts to the identity's sums.
  std::vector<Expr> lift(const State &x) const {
    const Expr masked = x["s"] == neg_infinity(t);
    std::vector<Expr> s{x["s"], select(masked, constant(t, 0, "lift"), constant(t, 1, "lift"))};
    for (int k = 0; k < width; ++k) s.push_back(select(masked, 0, x[k + 1]));
    return s;
  }
  // exp(m - r), where exp(-inf - -inf) counts as 0.
  static Expr rescale(const Expr &m, const Expr &r) {
    return select(m == neg_infinity(m.type()), 0, exp(m - r));
  }

  std::vector<Expr> combine(const State &a, const State &b) const {
    const Expr m = max(a["m"], b["m"]);
    const Expr ca = rescale(a["m"], m), cb = rescale(b["m"], m);
    std::vector<Expr> out{m};
    for (int k = 1; k < a.size(); ++k) out.push_back(a[k] * ca + b[k] * cb);
    return out;
  }

  Monoid base() const {
    std::vector<Monoid> factors{max(t)};
    std::vector<std::string> names{"m"};
    for (const Component &c : state())
      if (c.name != "m") {
        factors.push_back(sum(t));
        names.push_back(c.name);
      }
    return product(factors, names);
  }
  // psi(s; r): every sum relative to r instead of s.m.
  static std::vector<Expr> to_base(const State &s, const Expr &r) {
    std::vector<Expr> out{s["m"]};
    const Expr scale = rescale(s["m"], r);
    for (int k = 1; k < s.size(); ++k) out.push_back(s[k] * scale);
    return out;
  }
  // psi^-1(b; r): the sums relative to b.m again; a base state whose max is -inf holds no element.
  static std::vector<Expr> from_base(const State &b, const Expr &r) {
    std::vector<Expr> out{b["m"]};
    const Expr empty = b["m"] == neg_infinity(b["m"].type());
    for (int k = 1; k < b.size(); ++k) out.push_back(select(empty, 0, b[k] * exp(r - b["m"])));
    return out;
  }

  template <typename Builder>
  Builder &describe(Builder &builder) const {
    builder.state(state()).elements(elements()).identity(identity()).lift([this](const State &x) {
      return lift(x);
    });
    switch (outputs) {
      case RescaledOutputs::state:
        break;
      case RescaledOutputs::log_sum_exp:
        builder.finalize({{"lse", t}},
                         [](const State &s) { return std::vector<Expr>{s["m"] + log(s["l"])}; });
        break;
      case RescaledOutputs::normalized: {
        std::vector<Component> out;
        for (int k = 0; k < width; ++k) out.push_back({fmt::format("out_{}", k), t});
        builder.finalize(out, [w = width](const State &s) {
          std::vector<Expr> o;
          for (int k = 0; k < w; ++k) o.push_back(select(s["l"] == 0, 0, s[k + 2] / s["l"]));
          return o;
        });
        break;
      }
    }
    return builder;
  }

  // The reference of a combine: the larger max, so that every rescale factor is at most 1.
  static Expr reference(const State &a, const State &b) { return max(a["m"], b["m"]); }

  Monoid twisted() const {
    TwistBuilder builder("twisted_" + name, base());
    describe(builder).to_base(to_base).from_base(from_base).reference(t, reference);
    return builder.build();
  }

  Monoid builtin() const {
    MonoidBuilder builder(name);
    describe(builder)
        .combine([this](const State &a, const State &b) { return combine(a, b); })
        .origin(Monoid::Origin::builtin)
        .commutative();
    return with_twist_of(builder.build(), twisted(), reference);
  }
};

RescaledSums rescaled_sums(const std::string &family, const Type &t, int width, RescaledOutputs outputs) {
  if (!t.is_float()) fail("{}({}): the monoid needs a floating-point type", family, type_name(t));
  if (width < 0) fail("{}: the value width must not be negative, got {}", family, width);
  std::string name = width > 0 ? fmt::format("{}{}_{}", family, width, type_name(t)) : family_name(family, t);
  return RescaledSums{name, t, width, outputs};
}

RescaledSums attention_sums(const Type &t, int width) {
  if (width < 1) fail("attention({}, {}): the value width must be at least 1", type_name(t), width);
  return rescaled_sums("attention", t, width, RescaledOutputs::normalized);
}

// ---- Welford: the count, the mean and the sum of squared deviations ----

struct Welford {
  std::string name;
  Type t;

  template <typename Builder>
  Builder &describe(Builder &builder) const {
    builder.state({{"n", t}, {"mean", t}, {"M2", t}})
        .elements({{"x", t}})
        .identity({0.0, 0.0, 0.0})
        .lift([](const State &x) {
          return std::vector<Expr>{Expr(1.0), x["x"], Expr(0.0)};
        })
        .finalize({{"mean", t}, {"variance", t}}, [](const State &s) {
          return std::vector<Expr>{s["mean"], select(s["n"] == 0, 0, s["M2"] / s["n"])};
        });
    return builder;
  }

  static std::vector<Expr> chan(const State &a, const State &b) {
    const Expr n = a["n"] + b["n"];
    const Expr d = b["mean"] - a["mean"];
    // Defined for two empty operands too, where with_exact_identity leaves the result to this formula.
    const Expr w = select(n == 0, 0, b["n"] / n);
    return {n, a["mean"] + d * w, a["M2"] + b["M2"] + d * d * (a["n"] * w)};
  }
  // psi(s; r): the power sums of the deviations from r, n, sum (x - r) and sum (x - r)^2.
  static std::vector<Expr> to_base(const State &s, const Expr &r) {
    const Expr dev = s["mean"] - r;
    return {s["n"], s["n"] * dev, s["M2"] + s["n"] * dev * dev};
  }
  static std::vector<Expr> from_base(const State &b, const Expr &r) {
    const Expr empty = b["n"] == 0;
    return {b["n"], select(empty, 0, r + b["s1"] / b["n"]),
            select(empty, 0, b["s2"] - b["s1"] * b["s1"] / b["n"])};
  }

  // The reference of a combine: the left operand's mean, which makes its own deviations vanish.
  static Expr reference(const State &a, const State &) { return a["mean"]; }

  Monoid twisted() const {
    TwistBuilder builder("twisted_" + name, product({sum(t), sum(t), sum(t)}, {"n", "s1", "s2"}));
    describe(builder).to_base(to_base).from_base(from_base).reference(t, reference);
    return builder.build();
  }

  Monoid builtin() const {
    MonoidBuilder builder(name);
    describe(builder)
        .combine([this](const State &a, const State &b) {
          return with_exact_identity(a, b, {Expr(0.0), Expr(0.0), Expr(0.0)}, chan(a, b),
                                     BothIdentity::general);
        })
        .origin(Monoid::Origin::builtin)
        .commutative();
    return with_twist_of(builder.build(), twisted(), reference);
  }
};

Welford welford_of(const Type &t) {
  if (!t.is_float()) fail("welford({}): the monoid needs a floating-point type", type_name(t));
  return Welford{family_name("welford", t), t};
}

}  // namespace

Monoid softmax(const Type &t) {
  return rescaled_sums("softmax", t, 0, RescaledOutputs::state).builtin();
}
Monoid log_sum_exp(const Type &t) {
  return rescaled_sums("log_sum_exp", t, 0, RescaledOutputs::log_sum_exp).builtin();
}
Monoid attention(const Type &t, int width) {
  return attention_sums(t, width).builtin();
}
Monoid welford(const Type &t) {
  return welford_of(t).builtin();
}

Monoid twisted_softmax(const Type &t) {
  return rescaled_sums("softmax", t, 0, RescaledOutputs::state).twisted();
}
Monoid twisted_log_sum_exp(const Type &t) {
  return rescaled_sums("log_sum_exp", t, 0, RescaledOutputs::log_sum_exp).twisted();
}
Monoid twisted_attention(const Type &t, int width) {
  return attention_sums(t, width).twisted();
}
Monoid twisted_welford(const Type &t) {
  return welford_of(t).twisted();
}

}  // namespace twist::algebra
