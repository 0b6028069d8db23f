#include "algebra/builtins.h"

#include <algorithm>
#include <map>

#include "algebra/provenance.h"
#include "algebra/substitution.h"
#include "lang/error.h"

namespace twist::algebra {

using Origin = Monoid::Origin;
using namespace detail;

namespace detail {

Expr additive_identity(const Type &t) {
  return Expr(t.is_float() ? Halide::Internal::make_const(t, -0.0) : Halide::Internal::make_const(t, 0));
}

Expr lowest(const Type &t) {
  return t.is_float() ? neg_infinity(t) : Expr(t.min());
}
Expr highest(const Type &t) {
  return t.is_float() ? infinity(t) : Expr(t.max());
}

std::vector<Expr> with_exact_identity(const State &a, const State &b, const std::vector<Expr> &identity,
                                      const std::vector<Expr> &general, BothIdentity both) {
  Expr a_is_identity, b_is_identity;
  for (int k = 0; k < a.size(); ++k) {
    Expr ak = a[k] == identity[k], bk = b[k] == identity[k];
    a_is_identity = k == 0 ? ak : (a_is_identity && ak);
    b_is_identity = k == 0 ? bk : (b_is_identity && bk);
  }
  std::vector<Expr> out;
  for (int k = 0; k < a.size(); ++k)
    out.push_back(both == BothIdentity::general
                      ? select(a_is_identity && !b_is_identity, b[k],
                               select(b_is_identity && !a_is_identity, a[k], general[k]))
                      : select(a_is_identity, b[k], select(b_is_identity, a[k], general[k])));
  return out;
}

std::string family_name(const std::string &family, const Type &t) {
  return family + "_" + type_name(t);
}

}  // namespace detail

namespace {

// A monoid of one component combined by `op`.
Monoid single(const std::string &family, const std::string &component, const Type &t, const Expr &identity,
              Expr (*op)(const Expr &, const Expr &)) {
  return register_library_monoid(
      MonoidBuilder(family_name(family, t))
          .state({{component, t}})
          .elements({{"x", t}})
          .identity({identity})
          .combine([op](const State &a, const State &b) { return std::vector<Expr>{op(a[0], b[0])}; })
          .origin(Origin::builtin)
          .commutative()
          .build());
}

Monoid arg_extremum(const std::string &family, const Type &t, bool largest) {
  return register_library_monoid(MonoidBuilder(family_name(family, t))
                                     .state({{"value", t}, {"index", i32}})
                                     .elements({{"value", t}, {"index", i32}})
                                     .identity({largest ? lowest(t) : highest(t), highest(i32)})
                                     .combine([largest](const State &a, const State &b) {
                                       Expr better =
                                           largest ? b["value"] > a["value"] : b["value"] < a["value"];
                                       Expr take_b =
                                           better || (b["value"] == a["value"] && b["index"] < a["index"]);
                                       return std::vector<Expr>{select(take_b, b["value"], a["value"]),
                                                                select(take_b, b["index"], a["index"])};
                                     })
                                     .origin(Origin::builtin)
                                     .commutative()
                                     .build());
}

}  // namespace

Monoid sum(const Type &t) {
  return single("sum", "sum", t, additive_identity(t), add);
}
Monoid product(const Type &t) {
  return single("product", "prod", t, Expr(Halide::Internal::make_const(t, 1)), mul);
}
Monoid max(const Type &t) {
  return single("max", "max", t, lowest(t), max_of);
}
Monoid min(const Type &t) {
  return single("min", "min", t, highest(t), min_of);
}
Monoid argmax(const Type &value_type) {
  return arg_extremum("argmax", value_type, true);
}
Monoid argmin(const Type &value_type) {
  return arg_extremum("argmin", value_type, false);
}

Monoid affine(const Type &t, int n) {
  if (n < 1) fail("affine({}, {}): the dimension of the recurrence must be at least 1", type_name(t), n);
  if (!t.is_float()) fail("affine({}): the affine monoid needs a floating-point type", type_name(t));
  auto a_name = [n](int i, int j) { return n == 1 ? std::string("a") : fmt::format("a{}_{}", i, j); };
  auto b_name = [n](int i) { return n == 1 ? std::string("b") : fmt::format("b{}", i); };
  std::vector<Component> state;
  std::vector<Expr> identity;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      state.push_back({a_name(i, j), t});
      identity.push_back(i == j ? Expr(Halide::Internal::make_const(t, 1)) : additive_identity(t));
    }
  for (int i = 0; i < n; ++i) {
    state.push_back({b_name(i), t});
    identity.push_back(additive_identity(t));
  }
  std::string name = n == 1 ? family_name("affine", t) : fmt::format("affine{}_{}", n, type_name(t));
  return register_library_monoid(MonoidBuilder(name)
                                     .state(state)
                                     .identity(identity)
                                     .combine([=](const State &first, const State &then) {
                                       // `first` is applied first: the composite is h -> A2 (A1 h + b1) + b2.
                                       auto A = [&](const State &s, int i, int j) { return s[a_name(i, j)]; };
                                       std::vector<Expr> general;
                                       for (int i = 0; i < n; ++i)
                                         for (int j = 0; j < n; ++j) {
                                           Expr e = A(then, i, 0) * A(first, 0, j);
                                           for (int k = 1; k < n; ++k) e = e + A(then, i, k) * A(first, k, j);
                                           general.push_back(e);
                                         }
                                       for (int i = 0; i < n; ++i) {
                                         Expr e = A(then, i, 0) * first[b_name(0)];
                                         for (int k = 1; k < n; ++k) e = e + A(then, i, k) * first[b_name(k)];
                                         general.push_back(e + then[b_name(i)]);
                                       }
                                       // For n == 1 the formula is exact on two identities (in value);
                                       // for n > 1 it is not, and the right operand is returned.
                                       return with_exact_identity(
                                           first, then, identity, general,
                                           n == 1 ? BothIdentity::general : BothIdentity::right_operand);
                                     })
                                     .origin(Origin::builtin)
                                     .build());
}

namespace {

// Names for the concatenated components of the factors: a name stays as it is where it is unique among
// the factors, and is suffixed with the factor's index otherwise.
std::vector<std::vector<std::string>> concatenated_names(const std::vector<Monoid> &factors,
                                                         const std::vector<Component> Monoid::*components) {
  std::map<std::string, int> count;
  for (const Monoid &f : factors)
    for (const Component &c : f.*components) ++count[c.name];
  std::vector<std::vector<std::string>> names(factors.size());
  for (size_t k = 0; k < factors.size(); ++k)
    for (const Component &c : factors[k].*components)
      names[k].push_back(count[c.name] > 1 ? fmt::format("{}_{}", c.name, k) : c.name);
  return names;
}

std::vector<Component> renamed(const std::vector<Monoid> &factors,
                               const std::vector<Component> Monoid::*components,
                               const std::vector<std::vector<std::string>> &names) {
  std::vector<Component> out;
  for (size_t k = 0; k < factors.size(); ++k)
    for (size_t c = 0; c < (factors[k].*components).size(); ++c)
      out.push_back({names[k][c], (factors[k].*components)[c].type});
  return out;
}

// The values of `all` (a state of the product) that belong to factor k.
std::vector<Expr> slice(const State &all, const std::vector<size_t> &offsets, size_t k) {
  return std::vector<Expr>(all.vars().begin() + offsets[k], all.vars().begin() + offsets[k + 1]);
}

std::vector<size_t> offsets(const std::vector<Monoid> &factors,
                            const std::vector<Component> Monoid::*components) {
  std::vector<size_t> out{0};
  for (const Monoid &f : factors) out.push_back(out.back() + (f.*components).size());
  return out;
}

}  // namespace

Monoid product(const std::vector<Monoid> &factors, const std::vector<std::string> &state_names) {
  if (factors.empty()) fail("product() of monoids needs at least one factor");
  auto state_split = concatenated_names(factors, &Monoid::state);
  if (!state_names.empty()) {
    size_t k = 0, total = offsets(factors, &Monoid::state).back();
    if (state_names.size() != total)
      fail("product(): {} state name(s) given for the {} state components of the factors", state_names.size(),
           total);
    for (auto &names : state_split)
      for (std::string &name : names) name = state_names[k++];
  }
  const auto state = renamed(factors, &Monoid::state, state_split);
  const auto elements = renamed(factors, &Monoid::elements, concatenated_names(factors, &Monoid::elements));
  const auto outputs = renamed(factors, &Monoid::outputs, concatenated_names(factors, &Monoid::outputs));
  const auto state_at = offsets(factors, &Monoid::state), element_at = offsets(factors, &Monoid::elements);

  std::string name = "product(";
  std::vector<Expr> identity;
  for (size_t k = 0; k < factors.size(); ++k) {
    name += (k ? ", " : "") + factors[k].name;
    identity.insert(identity.end(), factors[k].identity.begin(), factors[k].identity.end());
  }
  // Each factor's expressions, with its variables bound to its slice of the product's.
  auto per_factor = [&](auto part) {
    return [=](const auto &...states) {
      std::vector<Expr> out;
      for (size_t k = 0; k < factors.size(); ++k) {
        std::vector<Expr> values = part(factors[k], k, states...);
        out.insert(out.end(), values.begin(), values.end());
      }
      return out;
    };
  };
  Monoid m = MonoidBuilder(name + ")")
                 .state(state)
                 .elements(elements)
                 .identity(identity)
                 .combine(per_factor([=](const Monoid &f, size_t k, const State &a, const State &b) {
                   return Substitution()
                       .bind(f.lhs(), slice(a, state_at, k))
                       .bind(f.rhs(), slice(b, state_at, k))(f.combine);
                 }))
                 .lift(per_factor([=](const Monoid &f, size_t k, const State &x) {
                   return Substitution().bind(f.element(), slice(x, element_at, k))(f.lift);
                 }))
                 .finalize(outputs, per_factor([=](const Monoid &f, size_t k, const State &s) {
                             return Substitution().bind(f.one(), slice(s, state_at, k))(f.finalize);
                           }))
                 .origin(Origin::product)
                 .commutative(std::all_of(factors.begin(), factors.end(),
                                          [](const Monoid &f) { return f.commutative; }))
                 .build();
  for (const Monoid &f : factors) m.factors.push_back(std::make_shared<const Monoid>(f));
  return m;
}

}  // namespace twist::algebra
