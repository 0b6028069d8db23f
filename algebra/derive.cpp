#include "algebra/derive.h"

#include "algebra/builtins.h"
#include "algebra/laws.h"
#include "algebra/substitution.h"
#include "lang/error.h"

namespace twist::algebra {

using namespace Halide::Internal;

namespace {

void validate(const LeftFold &fold) {
  if (fold.name.empty()) fail("a fold to derive a monoid from needs a name");
  if (fold.state.empty()) fail("fold '{}' needs a state", fold.name);
  if (fold.initial.size() != fold.state.size() || fold.step.size() != fold.state.size())
    fail("fold '{}': initial and step need one expression per state component ({}), got {} and {}", fold.name,
         fold.state.size(), fold.initial.size(), fold.step.size());
  for (size_t k = 0; k < fold.state.size(); ++k) {
    if (!fold.initial[k].defined() || !is_const(fold.initial[k]))
      fail("fold '{}': the initial value of '{}' must be a constant", fold.name, fold.state[k].name);
    if (!fold.step[k].defined() || fold.step[k].type() != fold.state[k].type)
      fail("fold '{}': the step of '{}' must be a {} expression", fold.name, fold.state[k].name,
           type_name(fold.state[k].type));
    if (auto err = first_type_error(fold.step[k]))
      fail("fold '{}': the step of '{}': {}", fold.name, fold.state[k].name, *err);
  }
  if (!fold.combine.empty() && fold.combine.size() != fold.state.size())
    fail("fold '{}': the given combine needs one expression per state component ({}), got {}", fold.name,
         fold.state.size(), fold.combine.size());
  for (const auto &element : fold.weak_right_inverse)
    if (element.size() != fold.elements.size())
      fail("fold '{}': each element of the weak right inverse needs {} value(s), one per element component",
           fold.name, fold.elements.size());
}

// The fold with its initial constants in the state's types (MonoidBuilder adapts constants the same way).
LeftFold with_typed_constants(LeftFold fold) {
  for (size_t k = 0; k < fold.initial.size() && k < fold.state.size(); ++k) {
    const Type &t = fold.state[k].type;
    if (const auto *f = fold.initial[k].as<FloatImm>(); f && f->type != t)
      fold.initial[k] = Expr(make_const(t, f->value));
    if (const auto *i = fold.initial[k].as<IntImm>(); i && i->type != t)
      fold.initial[k] = Expr(make_const(t, i->value));
  }
  return fold;
}

// All the weak right inverse's element values, one element after another.
std::vector<Expr> flattened_inverse(const LeftFold &fold) {
  std::vector<Expr> all;
  for (const auto &element : fold.weak_right_inverse) all.insert(all.end(), element.begin(), element.end());
  return all;
}

// The given fold, compiled for one arithmetic: h(list) from the initial state, and the weak right inverse.
class CompiledFold {
 public:
  CompiledFold(const LeftFold &fold, Arithmetic arithmetic)
      : initial_(VectorFunction(arithmetic, {}, fold.initial)({})),
        step_(arithmetic, joined(variable_names(fold.current()), variable_names(fold.element())), fold.step),
        g_(arithmetic, variable_names(fold.current()), flattened_inverse(fold)),
        element_size_(fold.elements.size()) {}

  Values operator()(std::span<const Values> list) const {
    Values s = initial_;
    for (const Values &x : list) s = step_(joined(s, x));
    return s;
  }
  // g(s), as a list of elements.
  std::vector<Values> inverse(const Values &s) const {
    const Values flat = g_(s);
    std::vector<Values> list;
    for (size_t i = 0; i < flat.size(); i += element_size_)
      list.emplace_back(flat.begin() + i, flat.begin() + i + element_size_);
    return list;
  }

 private:
  Values initial_;
  VectorFunction step_, g_;
  size_t element_size_;
};

// The step with the state bound to `state` and the element to `element`.
std::vector<Expr> step_at(const LeftFold &fold, const std::vector<Expr> &state,
                          const std::vector<Expr> &element) {
  return Substitution().bind(fold.current(), state).bind(fold.element(), element)(fold.step);
}

std::vector<Expr> constants(const Type &t, const std::vector<double> &values) {
  std::vector<Expr> out;
  for (double v : values) out.push_back(Expr(make_const(t, v)));
  return out;
}

// A step affine in the state: step(s, x) = A(x) s + c(x). Returns the affine monoid with the fold's lift and
// finalize, or notes why the step is not affine.
std::optional<Monoid> affine_derivation(const LeftFold &fold, const CheckOptions &options,
                                        std::vector<std::string> &notes) {
  const size_t n = fold.state.size();
  const Type t = fold.state[0].type;
  for (const Component &c : fold.state)
    if (c.type != t || !t.is_float()) {
      notes.push_back(
          "the step is not treated as affine: its state components are not all of one floating-point type");
      return std::nullopt;
    }
  // c(x) = step(0, x) and column j of A(x) = step(e_j, x) - c(x).
  const std::vector<Expr> c =
      simplified(step_at(fold, constants(t, std::vector<double>(n, 0.0)), fold.element().vars()));
  std::vector<std::vector<Expr>> A(n, std::vector<Expr>(n));
  for (size_t j = 0; j < n; ++j) {
    std::vector<double> unit(n, 0.0);
    unit[j] = 1.0;
    const std::vector<Expr> column = step_at(fold, constants(t, unit), fold.element().vars());
    for (size_t i = 0; i < n; ++i) A[i][j] = Expr(simplify(column[i] - c[i]));
  }
  std::vector<Expr> reconstruction;
  for (size_t i = 0; i < n; ++i) {
    Expr e = c[i];
    for (size_t j = 0; j < n; ++j) e = A[i][j] * fold.current()[static_cast<int>(j)] + e;
    reconstruction.push_back(e);
  }
  bool symbolic = true;
  for (size_t i = 0; i < n; ++i) symbolic &= is_const_zero(simplify(fold.step[i] - reconstruction[i]));
  if (!symbolic) {
    // Halide's simplifier could not show it: compare the step with A(x) s + c(x) at random states and
    // elements instead (a nonlinear step differs there).
    const auto parameters = joined(variable_names(fold.current()), variable_names(fold.element()));
    const VectorFunction step_e(Arithmetic::extended, parameters, fold.step),
        step_d(Arithmetic::exact, parameters, fold.step);
    const VectorFunction rec_e(Arithmetic::extended, parameters, reconstruction),
        rec_d(Arithmetic::exact, parameters, reconstruction);
    const ElementSampler states(fold.state), elements(fold.elements);
    Rng rng(options.seed);
    std::vector<bool> floating;
    for (const auto *components : {&fold.state, &fold.elements})
      for (const Component &c : *components) floating.push_back(c.type.is_float());
    int conclusive = 0;
    for (int trial = 0; trial < options.trials; ++trial) {
      const Values args =
          joined(states.element(rng, Regime::spread), elements.element(rng, elements.any_regime(rng)));
      Evaluated step{step_e(args), step_d(args)}, affine{rec_e(args), rec_d(args)};
      uint64_t seed = rng();
      for (int j = 0; j < 3; ++j) {
        const Values near = nearby(args, floating, seed);
        step.nearby_extended.push_back(step_e(near));
        step.nearby_exact.push_back(step_d(near));
        affine.nearby_extended.push_back(rec_e(near));
        affine.nearby_exact.push_back(rec_d(near));
      }
      const Comparison cmp = compare(component_types(fold.state), step, affine);
      if (cmp.agreement == Agreement::disagree) {
        notes.push_back(
            fmt::format("the step is not affine in the state: at a random state it differs from "
                        "A(x) s + c(x) in '{}' by {}",
                        fold.state[cmp.component].name, static_cast<double>(cmp.difference)));
        return std::nullopt;
      }
      conclusive += cmp.agreement == Agreement::agree;
    }
    if (conclusive < options.trials / 2) {
      notes.push_back(
          "the step could not be shown affine in the state (too many NaN or rounding-decided instances)");
      return std::nullopt;
    }
  }
  notes.push_back(fmt::format("the step is affine in the state ({}): step(s, x) = A(x) s + c(x)",
                              symbolic ? "shown by Halide's simplifier" : "tested at random states"));

  Monoid m = affine(t, static_cast<int>(n));
  m.name = fold.name;
  m.origin = Monoid::Origin::derived;
  m.elements = fold.elements;
  m.lift.clear();
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < n; ++j) m.lift.push_back(A[i][j]);
  for (size_t i = 0; i < n; ++i) m.lift.push_back(c[i]);
  // The fold's value is the composed map applied to the initial state: A s0 + b.
  const State map = m.one();
  m.outputs = fold.state;
  m.finalize.clear();
  for (size_t i = 0; i < n; ++i) {
    Expr e = map[static_cast<int>(n * n + i)];
    for (size_t j = 0; j < n; ++j) e = map[static_cast<int>(i * n + j)] * fold.initial[j] + e;
    m.finalize.push_back(e);
  }
  m.validate();
  return m;
}

// s . t = h(g(s) ++ g(t)).
Monoid inverse_derivation(const LeftFold &fold) {
  return MonoidBuilder(fold.name)
      .state(fold.state)
      .elements(fold.elements)
      .identity(fold.initial)
      .lift([&](const State &x) { return step_at(fold, fold.initial, x.vars()); })
      .combine([&](const State &a, const State &b) {
        std::vector<Expr> s = fold.initial;
        for (const State *operand : {&a, &b})
          for (const std::vector<Expr> &g : fold.weak_right_inverse)
            s = step_at(fold, s, Substitution().bind(fold.current(), operand->vars())(g));
        return simplified(s);
      })
      .origin(Monoid::Origin::derived)
      .build();
}

// The user's combine, lifted by step(initial, x) and held to the step (Monoid::step).
Monoid with_given_combine(const LeftFold &fold) {
  return MonoidBuilder(fold.name)
      .state(fold.state)
      .elements(fold.elements)
      .identity(fold.initial)
      .lift([&](const State &x) { return step_at(fold, fold.initial, x.vars()); })
      .combine([&](const State &a, const State &b) {
        return Substitution().bind(fold.lhs(), a.vars()).bind(fold.rhs(), b.vars())(fold.combine);
      })
      .step([&](const State &s, const State &x) {
        return Substitution().bind(fold.current(), s.vars()).bind(fold.element(), x.vars())(fold.step);
      })
      .origin(Monoid::Origin::derived)
      .build();
}

Verdict refuse(const LeftFold &fold, std::string reason, std::vector<std::string> notes,
               std::optional<Counterexample> counterexample) {
  return Verdict{
      false, Level::derived, fold.name, std::move(reason), std::move(notes), std::move(counterexample)};
}

}  // namespace

Derivation derive_monoid(const LeftFold &given_fold, const CheckOptions &options) {
  const LeftFold fold = with_typed_constants(given_fold);
  validate(fold);
  std::vector<std::string> notes;
  const bool given_combine = !fold.combine.empty();
  std::optional<Monoid> m;
  if (given_combine) m = with_given_combine(fold);
  if (!m) m = affine_derivation(fold, options, notes);
  const bool through_inverse = !m && !fold.weak_right_inverse.empty();
  if (through_inverse) m = inverse_derivation(fold);
  const char *how = given_combine     ? "the given combine, lifted by step(initial, x) and held to the step"
                    : through_inverse ? "h(g(s) ++ g(t)) through the given weak right inverse g"
                                      : "the composition of the step's affine maps";
  if (!m)
    return {std::nullopt,
            refuse(fold,
                   "no derivation applies: the step is not affine in the state, and neither a weak right "
                   "inverse (LeftFold::weak_right_inverse) nor a combine (LeftFold::combine) was given",
                   notes, std::nullopt)};

  const CompiledFold fold_e(fold, Arithmetic::extended), fold_d(fold, Arithmetic::exact);
  auto given = [&](const MonoidEvaluator &ev) -> const CompiledFold & {
    return ev.arithmetic() == Arithmetic::extended ? fold_e : fold_d;
  };
  LawTester tester(*m, options);
  const ElementSampler sampler(fold.elements);
  const auto state_names = component_names(fold.state);
  const auto state_types = component_types(fold.state);

  if (through_inverse) {
    const LawResult inverse = tester.run(Law::weak_right_inverse, state_names, state_types, [&](Rng &rng) {
      std::vector<Values> list = sampler.list(
          rng, std::uniform_int_distribution<int>(0, options.max_list_length)(rng), sampler.any_regime(rng));
      const Values s = fold_d(list);
      // g and h both in the arithmetic of the side, so that the rounding of g(s) is measured too.
      Side h_of_g = [&](const MonoidEvaluator &ev, const Instance &in) {
        return given(ev)(given(ev).inverse(in.states[0]));
      };
      Side itself = [](const MonoidEvaluator &, const Instance &in) { return in.states[0]; };
      return std::tuple{Instance{.states = {s}, .elements = fold_d.inverse(s)}, h_of_g, itself};
    });
    notes.push_back(inverse.summary());
    if (!inverse.passed(options.trials))
      return {m, refuse(fold, "the given g is not a weak right inverse of the fold", notes,
                        inverse.counterexample)};
  }

  const Verdict checked = check_associativity(*m, options);
  notes.push_back(fmt::format("the derived monoid ({}): {}", how, checked.to_string()));
  if (!checked.accepted)
    return {m, refuse(fold, fmt::format("the combine derived as {} is not accepted", how), notes,
                      checked.counterexample)};

  const LawResult agreement = tester.run(Law::fold_agreement, state_names, state_types, [&](Rng &rng) {
    std::vector<Values> list =
        sampler.list(rng, std::uniform_int_distribution<int>(0, 2 * options.max_list_length)(rng),
                     sampler.any_regime(rng));
    Side by_fold = [&](const MonoidEvaluator &ev, const Instance &in) { return given(ev)(in.elements); };
    Side by_monoid = [](const MonoidEvaluator &ev, const Instance &in) {
      return ev.finalize(ev.fold(in.elements));
    };
    return std::tuple{Instance{.elements = list}, by_fold, by_monoid};
  });
  notes.push_back(agreement.summary());
  if (!agreement.passed(options.trials))
    return {m, refuse(fold, "the derived monoid's fold does not agree with the given fold", notes,
                      agreement.counterexample)};
  return {
      m, Verdict{true, Level::derived, fold.name,
                 fmt::format("derived as {}; the derived monoid is associative ({}) and its fold agrees with "
                             "the given fold",
                             how, level_name(checked.level)),
                 notes, std::nullopt}};
}

LeftFold left_fold(const Monoid &m) {
  if (m.step.empty())
    fail("monoid '{}' has no step to derive from; give one with MonoidBuilder::step", m.name);
  LeftFold fold{m.name, m.state, m.elements, m.identity, {}, {}, {}};
  // The monoid's variables are "s.", "x.", "a." and "b." like the fold's, so its expressions carry over.
  fold.step = m.step;
  fold.combine = m.combine;
  return fold;
}

}  // namespace twist::algebra
