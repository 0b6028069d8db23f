#include "algebra/laws.h"

#include <algorithm>
#include <cmath>

#include "algebra/provenance.h"
#include "algebra/substitution.h"
#include "algebra/twist.h"
#include "lang/error.h"

namespace twist::algebra {

namespace {

bool has_nan(const Values &v) {
  for (Real x : v)
    if (std::isnan(x)) return true;
  return false;
}

bool all_finite(const Counterexample &c) {
  auto finite = [](const Values &v) {
    for (Real x : v)
      if (!std::isfinite(x)) return false;
    return true;
  };
  for (const Values &v : c.states)
    if (!finite(v)) return false;
  for (const Values &v : c.elements)
    if (!finite(v)) return false;
  return finite(c.lhs) && finite(c.rhs);
}

int uniform(Rng &rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

}  // namespace

std::string LawResult::summary() const {
  return fmt::format("{}: {} instance(s) agree{}, {} inconclusive", law_statement(law), conclusive,
                     counterexample ? " until a counterexample" : "", inconclusive);
}

LawTester::LawTester(const Monoid &m, const CheckOptions &options)
    : monoid_(m),
      options_(options),
      extended_(m, Arithmetic::extended),
      exact_(m, Arithmetic::exact),
      sampler_(m.elements, m.element_domains),
      rng_(options.seed) {
  // The identity and lifts of single elements are states too (a tree's leaves), and the edge cases live
  // there: the identity laws must hold on lifts of arbitrary elements, not only on folds from the identity.
  states_.push_back(exact_.identity());
  magnitudes_[kModerate].push_back(0);
  moderate_states_.push_back(0);
  for (int attempt = 0; static_cast<int>(states_.size()) < options.trials && attempt < 4 * options.trials;
       ++attempt) {
    const Regime regime = sampler_.any_regime(rng_);
    const int length = list_length(rng_, options.max_list_length);
    const int scale = sampler_.extreme_scale(rng_);
    Values s = attempt < options.trials / 8 ? exact_.lift(sampler_.element(rng_, regime, scale))
                                            : exact_.fold(sampler_.list(rng_, length, regime, scale));
    if (has_nan(s)) continue;
    const int magnitude = regime == Regime::extremes ? scale : kModerate;
    magnitudes_[magnitude].push_back(static_cast<int>(states_.size()));
    if (magnitude == kModerate && length <= options.max_list_length)
      moderate_states_.push_back(static_cast<int>(states_.size()));
    states_.push_back(std::move(s));
  }
}

int LawTester::list_length(Rng &rng, int max_short_length) const {
  // One list in 32 is as long as the schedule folds (a tile, a tree, a split part) or long at random
  // (log-uniformly into the thousands), which is where counts and sums pass what short lists reach.
  if (uniform(rng, 0, 31) == 0) {
    const int choices = static_cast<int>(options_.fold_lengths.size());
    const int k = uniform(rng, 0, choices);
    // A schedule's extent of 2^17 would cost seconds of folding; 8192 passes what short lists reach.
    if (k < choices) return std::clamp(options_.fold_lengths[k], 1, 8192);
    const int bits = uniform(rng, 4, std::max(4, static_cast<int>(std::log2(options_.max_long_list_length))));
    return uniform(rng, 1 << (bits - 1), 1 << bits);
  }
  return uniform(rng, 0, max_short_length);
}

Values LawTester::moderate_state(Rng &rng) const {
  return states_[moderate_states_[uniform(rng, 0, static_cast<int>(moderate_states_.size()) - 1)]];
}

Values LawTester::random_state(Rng &rng) const {
  return states_[uniform(rng, 0, static_cast<int>(states_.size()) - 1)];
}

std::vector<Values> LawTester::random_states(Rng &rng, int count) const {
  const int pick = uniform(rng, 0, static_cast<int>(states_.size()) - 1);
  const std::vector<int> *same_magnitude = nullptr;
  for (const auto &[magnitude, indices] : magnitudes_)
    if (std::find(indices.begin(), indices.end(), pick) != indices.end()) same_magnitude = &indices;
  std::vector<Values> out{states_[pick]};
  while (static_cast<int>(out.size()) < count)
    out.push_back(states_[(*same_magnitude)[uniform(rng, 0, static_cast<int>(same_magnitude->size()) - 1)]]);
  return out;
}

std::vector<Values> LawTester::random_list(Rng &rng) const {
  return sampler_.list(rng, list_length(rng, 2 * options_.max_list_length), sampler_.any_regime(rng));
}

namespace {

std::vector<bool> floating(const std::vector<Component> &components) {
  std::vector<bool> out;
  for (const Component &c : components) out.push_back(c.type.is_float());
  return out;
}

}  // namespace

Instance LawTester::nearby_instance(const Instance &instance, uint64_t &seed) const {
  Instance out = instance;
  const auto state_floats = floating(monoid_.state), element_floats = floating(monoid_.elements);
  for (Values &s : out.states) s = algebra::nearby(s, state_floats, seed);
  for (Values &x : out.elements) x = algebra::nearby(x, element_floats, seed);
  if (monoid_.twist) {
    const auto base_floats = floating(monoid_.twist->base->state);
    for (Values &b : out.base_states) b = algebra::nearby(b, base_floats, seed);
  }
  if (out.reference) *out.reference = algebra::nearby({*out.reference}, {true}, seed)[0];
  return out;
}

Real LawTester::input_magnitude(const Instance &instance) const {
  Real largest = 0;
  auto include = [&](const Values &values) {
    for (Real v : values)
      if (std::isfinite(v)) largest = std::fmax(largest, std::fabs(v));
  };
  include(exact_.identity());
  for (const auto *group : {&instance.states, &instance.elements, &instance.base_states})
    for (const Values &v : *group) include(v);
  if (instance.reference) include({*instance.reference});
  return largest;
}

bool LawTester::nan_is_evidence(const Instance &instance) const {
  // A NaN from finite inputs may be rounding near a singularity (the square root of a variance rounded
  // below zero); from an infinity that is the identity's own (a masked score) it is a missing guard.
  if (!instance.elements.empty() || !instance.base_states.empty() || instance.reference) return false;
  const Values &e = exact_.identity();
  bool identity_infinity = false;
  for (const Values &s : instance.states)
    for (size_t k = 0; k < s.size() && k < e.size(); ++k) {
      if (std::isfinite(s[k])) continue;
      if (!(s[k] == e[k])) return false;
      identity_infinity = true;
    }
  return identity_infinity;
}

LawResult LawTester::run(Law law, const std::vector<std::string> &side_names,
                         const std::vector<Type> &side_types,
                         const std::function<std::tuple<Instance, Side, Side>(Rng &)> &draw,
                         bool infinities_are_evidence) {
  LawResult result{.law = law};
  for (int trial = 0; trial < options_.trials; ++trial) {
    Instance instance;
    Evaluated l, r;
    try {
      auto [drawn, lhs, rhs] = draw(rng_);
      instance = std::move(drawn);
      l = {lhs(extended_, instance), lhs(exact_, instance)};
      r = {rhs(extended_, instance), rhs(exact_, instance)};
      uint64_t seed = rng_();
      for (int j = 0; j < 3; ++j) {
        const Instance near = nearby_instance(instance, seed);
        l.nearby_extended.push_back(lhs(extended_, near));
        l.nearby_exact.push_back(lhs(exact_, near));
        r.nearby_extended.push_back(rhs(extended_, near));
        r.nearby_exact.push_back(rhs(exact_, near));
      }
    } catch (const Error &) {
      // An evaluation that fails on this instance (a NaN cast to an integer, say) decides nothing.
      ++result.inconclusive;
      continue;
    }
    const Comparison c = compare(side_types, l, r, infinities_are_evidence, input_magnitude(instance),
                                 nan_is_evidence(instance));
    if (c.agreement == Agreement::agree) ++result.conclusive;
    if (c.agreement == Agreement::inconclusive) ++result.inconclusive;
    if (c.agreement != Agreement::disagree) continue;
    Counterexample ce{law,
                      monoid_.name,
                      component_names(monoid_.state),
                      component_names(monoid_.elements),
                      instance.states,
                      instance.elements,
                      instance.split,
                      // Without a reference the maps do not read the one the instance carries.
                      monoid_.twist && reference_type(*monoid_.twist) ? instance.reference : std::nullopt,
                      {},
                      side_names,
                      l.extended,
                      r.extended,
                      c.component,
                      c.difference,
                      c.tolerance};
    // A counterexample of finite numbers explains more than one through infinities, so the search goes
    // on for one while the trials last.
    const bool finite = all_finite(ce);
    if (!result.counterexample || finite) result.counterexample = std::move(ce);
    if (finite) break;
  }
  return result;
}

std::pair<Side, Side> LawTester::state_law_sides(Law law) {
  if (law == Law::associativity)
    return {[](const MonoidEvaluator &m, const Instance &in) {
              const auto &s = in.states;
              return m.combine(m.combine(s[0], s[1]), s[2]);
            },
            [](const MonoidEvaluator &m, const Instance &in) {
              const auto &s = in.states;
              return m.combine(s[0], m.combine(s[1], s[2]));
            }};
  if (law == Law::commutativity)
    return {
        [](const MonoidEvaluator &m, const Instance &in) { return m.combine(in.states[0], in.states[1]); },
        [](const MonoidEvaluator &m, const Instance &in) { return m.combine(in.states[1], in.states[0]); }};
  TWIST_CHECK(law == Law::left_identity || law == Law::right_identity, "{} is not a law on states",
              law_statement(law));
  return {[law](const MonoidEvaluator &m, const Instance &in) {
            const Values &a = in.states[0];
            return law == Law::left_identity ? m.combine(m.identity(), a) : m.combine(a, m.identity());
          },
          [](const MonoidEvaluator &, const Instance &in) { return in.states[0]; }};
}

LawResult LawTester::identity_law(Law which) {
  const auto [combined, itself] = state_law_sides(which);
  return run(which, component_names(monoid_.state), component_types(monoid_.state), [&](Rng &rng) {
    return std::tuple{Instance{.states = {random_state(rng)}}, combined, itself};
  });
}

LawResult LawTester::commutativity_law() {
  const auto [ab, ba] = state_law_sides(Law::commutativity);
  return run(Law::commutativity, component_names(monoid_.state), component_types(monoid_.state),
             [&](Rng &rng) {
               return std::tuple{Instance{.states = random_states(rng, 2)}, ab, ba};
             });
}

std::vector<LawResult> LawTester::user_step_laws() {
  const auto names = component_names(monoid_.state);
  const auto types = component_types(monoid_.state);
  std::vector<LawResult> results;
  results.push_back(run(Law::user_homomorphism, names, types, [&](Rng &rng) {
    std::vector<Values> x = random_list(rng);
    const int k = uniform(rng, 0, static_cast<int>(x.size()));
    const auto [whole, halves] = sequence_law_sides(Law::user_homomorphism);
    return std::tuple{Instance{.elements = std::move(x), .split = k}, whole, halves};
  }));
  results.push_back(run(Law::user_fold_directions, names, types, [&](Rng &rng) {
    const auto [leftward, rightward] = sequence_law_sides(Law::user_fold_directions);
    return std::tuple{Instance{.elements = random_list(rng)}, leftward, rightward};
  }));
  return results;
}

std::pair<Side, Side> LawTester::sequence_law_sides(Law law) {
  TWIST_CHECK(law == Law::user_homomorphism || law == Law::user_fold_directions,
              "{} is not a law on the user's fold", law_statement(law));
  Side user_fold = [](const MonoidEvaluator &m, const Instance &in) { return m.step_fold(in.elements); };
  if (law == Law::user_homomorphism)
    return {user_fold, [](const MonoidEvaluator &m, const Instance &in) {
              std::span<const Values> all(in.elements);
              return m.combine(m.step_fold(all.first(in.split)), m.step_fold(all.subspan(in.split)));
            }};
  return {user_fold, [](const MonoidEvaluator &m, const Instance &in) {
            Values s = m.identity();
            for (auto it = in.elements.rbegin(); it != in.elements.rend(); ++it)
              s = m.combine(m.step(m.identity(), *it), s);
            return s;
          }};
}

LawResult LawTester::check(Law law, const Instance &instance) {
  const auto [lhs, rhs] = law == Law::user_homomorphism ? sequence_law_sides(law) : state_law_sides(law);
  CheckOptions once = options_;
  once.trials = 1;
  std::swap(options_, once);
  LawResult result = run(law, component_names(monoid_.state), component_types(monoid_.state), [&](Rng &) {
    return std::tuple{instance, lhs, rhs};
  });
  std::swap(options_, once);
  return result;
}

std::vector<LawResult> LawTester::monoid_laws() {
  const auto names = component_names(monoid_.state);
  const auto types = component_types(monoid_.state);
  std::vector<LawResult> results;
  const auto [left, right] = state_law_sides(Law::associativity);
  results.push_back(run(Law::associativity, names, types, [&](Rng &rng) {
    return std::tuple{Instance{.states = random_states(rng, 3)}, left, right};
  }));
  results.push_back(identity_law(Law::left_identity));
  results.push_back(identity_law(Law::right_identity));
  results.push_back(run(Law::homomorphism, names, types, [&](Rng &rng) {
    std::vector<Values> x = random_list(rng);
    const int k = uniform(rng, 0, static_cast<int>(x.size()));
    Side whole = [](const MonoidEvaluator &m, const Instance &in) { return m.fold(in.elements); };
    Side halves = [](const MonoidEvaluator &m, const Instance &in) {
      std::span<const Values> all(in.elements);
      return m.combine(m.fold(all.first(in.split)), m.fold(all.subspan(in.split)));
    };
    return std::tuple{Instance{.elements = std::move(x), .split = k}, whole, halves};
  }));
  results.push_back(run(Law::fold_directions, names, types, [&](Rng &rng) {
    Side leftward = [](const MonoidEvaluator &m, const Instance &in) { return m.fold(in.elements); };
    Side rightward = [](const MonoidEvaluator &m, const Instance &in) {
      Values s = m.identity();
      for (auto it = in.elements.rbegin(); it != in.elements.rend(); ++it) s = m.combine(m.lift(*it), s);
      return s;
    };
    return std::tuple{Instance{.elements = random_list(rng)}, leftward, rightward};
  }));
  if (!monoid_.step.empty()) {
    const std::vector<LawResult> step_laws = user_step_laws();
    results.insert(results.end(), step_laws.begin(), step_laws.end());
  }
  return results;
}

namespace {

// A twist's maps, compiled for one arithmetic. The transport is simplified as the twist's combine was
// (TwistBuilder::build), so that both compute with the same constants: the simplifier turns x / 0.7f into
// x * 1.42857146f, and a transport that kept the division would differ from the combine by the rounding
// of that constant, for a spelling of the same twist.
struct TwistMaps {
  VectorFunction psi, psi_inverse, transported;
  MonoidEvaluator base;

  TwistMaps(const Monoid &m, const Monoid::Twist &twist, const Type &ref_type, Arithmetic arithmetic)
      : psi(arithmetic, joined(variable_names(m.one()), {kReferenceName}), twist.to_base),
        psi_inverse(arithmetic, joined(variable_names(twist.base->one()), {kReferenceName}), twist.from_base),
        transported(arithmetic,
                    joined(joined(variable_names(m.lhs()), variable_names(m.rhs())), {kReferenceName}),
                    simplified(transported_combine(m, twist, reference_variable(ref_type)))),
        base(*twist.base, arithmetic) {}
};

}  // namespace

std::vector<LawResult> LawTester::twist_premises() {
  TWIST_CHECK(monoid_.twist.has_value(), "monoid '{}' has no twist", monoid_.name);
  const Monoid::Twist &twist = *monoid_.twist;
  const std::optional<Type> ref_type = reference_type(twist);
  // Without a reference the maps do not read "ref"; any value will do.
  const Type rtype = ref_type.value_or(f64);
  const TwistMaps ext(monoid_, twist, rtype, Arithmetic::extended),
      dbl(monoid_, twist, rtype, Arithmetic::exact);
  auto maps = [&](const MonoidEvaluator &m) -> const TwistMaps & {
    return m.arithmetic() == Arithmetic::extended ? ext : dbl;
  };

  // References are drawn where a combine would take them: the rule applied to reachable states where the
  // rule is known, and otherwise the values that components of the reference's type take.
  std::optional<VectorFunction> rule;
  if (ref_type)
    if (auto r = reference_rule(monoid_))
      rule.emplace(Arithmetic::exact, joined(variable_names(monoid_.lhs()), variable_names(monoid_.rhs())),
                   std::vector<Expr>{r->rule});
  auto draw_reference = [&](Rng &rng, const Values &a, const Values &b) -> std::optional<Real> {
    if (!ref_type) return Real(0);
    for (int attempt = 0; attempt < 16; ++attempt) {
      Real r;
      const int kind = uniform(rng, 0, rule ? 2 : 0);
      if (kind == 1)
        r = (*rule)(joined(a, b))[0];
      else if (kind == 2)
        r = (*rule)(joined(moderate_state(rng), moderate_state(rng)))[0];
      else {
        const Values s = moderate_state(rng);
        std::vector<int> candidates;
        for (size_t k = 0; k < s.size(); ++k)
          if (monoid_.state[k].type == *ref_type) candidates.push_back(static_cast<int>(k));
        if (candidates.empty()) return std::nullopt;
        r = s[candidates[uniform(rng, 0, static_cast<int>(candidates.size()) - 1)]];
      }
      if (std::isfinite(r)) return r;
    }
    return std::nullopt;
  };

  const auto names = component_names(monoid_.state), base_names = component_names(twist.base->state);
  const auto types = component_types(monoid_.state), base_types = component_types(twist.base->state);
  Side nothing = [](const MonoidEvaluator &, const Instance &) -> Values {
    throw Error("no reference could be drawn");
  };
  std::vector<LawResult> results;

  results.push_back(run(Law::transport, names, types, [&](Rng &rng) {
    Values a = moderate_state(rng), b = moderate_state(rng);
    const auto r = draw_reference(rng, a, b);
    if (!r) return std::tuple{Instance{}, nothing, nothing};
    Side combined = [](const MonoidEvaluator &m, const Instance &in) {
      return m.combine(in.states[0], in.states[1]);
    };
    Side transported = [&maps](const MonoidEvaluator &m, const Instance &in) {
      return maps(m).transported(joined(joined(in.states[0], in.states[1]), {*in.reference}));
    };
    return std::tuple{Instance{.states = {a, b}, .reference = r}, combined, transported};
  }));
  results.push_back(run(Law::state_round_trip, names, types, [&](Rng &rng) {
    Values s = moderate_state(rng);
    const auto r = draw_reference(rng, s, moderate_state(rng));
    if (!r) return std::tuple{Instance{}, nothing, nothing};
    Side round_trip = [&maps](const MonoidEvaluator &m, const Instance &in) {
      const TwistMaps &t = maps(m);
      return t.psi_inverse(joined(t.psi(joined(in.states[0], {*in.reference})), {*in.reference}));
    };
    Side itself = [](const MonoidEvaluator &, const Instance &in) { return in.states[0]; };
    return std::tuple{Instance{.states = {s}, .reference = r}, round_trip, itself};
  }));
  results.push_back(run(Law::base_round_trip, base_names, base_types, [&](Rng &rng) {
    Values a = moderate_state(rng), b = moderate_state(rng);
    const auto r = draw_reference(rng, a, b);
    if (!r) return std::tuple{Instance{}, nothing, nothing};
    // B is a base state the combine passes through: psi(a; r) (+) psi(b; r), computed once in double.
    Values B = dbl.base.combine(dbl.psi(joined(a, {*r})), dbl.psi(joined(b, {*r})));
    Side round_trip = [&maps](const MonoidEvaluator &m, const Instance &in) {
      const TwistMaps &t = maps(m);
      return t.psi(joined(t.psi_inverse(joined(in.base_states[0], {*in.reference})), {*in.reference}));
    };
    Side itself = [](const MonoidEvaluator &, const Instance &in) { return in.base_states[0]; };
    return std::tuple{Instance{.states = {a, b}, .reference = r, .base_states = {B}}, round_trip, itself};
  }));
  results.push_back(run(
      Law::base_identity, base_names, base_types,
      [&](Rng &rng) {
        const auto r = draw_reference(rng, moderate_state(rng), moderate_state(rng));
        if (!r) return std::tuple{Instance{}, nothing, nothing};
        Side mapped = [&maps](const MonoidEvaluator &m, const Instance &in) {
          return maps(m).psi(joined(m.identity(), {*in.reference}));
        };
        Side base_identity = [&maps](const MonoidEvaluator &m, const Instance &) {
          return maps(m).base.identity();
        };
        return std::tuple{Instance{.reference = r}, mapped, base_identity};
      },
      /*infinities_are_evidence=*/true));
  return results;
}

}  // namespace twist::algebra
