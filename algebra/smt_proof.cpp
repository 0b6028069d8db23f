#include "algebra/smt_proof.h"

#include <algorithm>
#include <cmath>

#include "algebra/smt_encoding.h"
#include "algebra/substitution.h"
#include "lang/float_formats.h"

namespace twist::algebra {

namespace {

// A law's two sides, per state component, as terms.
struct Sides {
  std::vector<z3::expr> lhs, rhs;
};

class LawQueries {
 public:
  LawQueries(const Monoid &m, unsigned timeout_ms)
      : monoid_(m), encoder_(context_), timeout_ms_(timeout_ms), parameters_(m.parameters()) {
    for (const Component &p : parameters_) {
      parameter_terms_.push_back(encoder_.unknown("param." + p.name, p.type));
      encoder_.bind(p.name, parameter_terms_.back());
    }
  }

  SmtLawResult ask(Law law) {
    SmtLawResult result{.law = law};
    try {
      const z3::check_result everywhere = violated(law, /*over_lifts=*/false);
      if (everywhere == z3::unsat) {
        result.proved = true;
        result.finding = parameters_.empty() ? "proved for every state"
                                             : "proved for every state and every value of its Params";
        return result;
      }
      const std::string first = everywhere == z3::sat ? "violated by some state (perhaps unreachable)"
                                                      : "undecided for every state in the time limit";
      const z3::check_result lifted = violated(law, /*over_lifts=*/true);
      if (lifted == z3::sat) {
        result.candidate = candidate(law, result.parameters);
        result.finding = first + "; violated by lifts of elements in the model" +
                         (parameters_.empty() ? "" : " (at " + to_string(result.parameters) + ")");
      } else {
        result.finding = first + (lifted == z3::unsat ? "; holds on lifts of single elements"
                                                      : "; undecided on lifts in the time limit");
      }
    } catch (const NotEncodable &e) {
      result.finding = fmt::format("not encoded: {}", e.what());
    } catch (const z3::exception &e) {
      result.finding = fmt::format("not decided: Z3 said {}", e.msg());
    }
    return result;
  }

 private:
  // Unknown states a, b, c; over lifts, each is the lift of unknown elements x0, x1, x2 instead.
  std::vector<z3::expr> state_terms(int index, bool over_lifts) {
    if (!over_lifts) {
      return unknown_state(fmt::format("s{}.", index));
    }
    bind_element(new_element(index));
    std::vector<z3::expr> lifted;
    for (const Expr &e : monoid_.lift) lifted.push_back(encoder_.encode(e));
    return lifted;
  }

  // Unknown element values, inside the elements' domains; recorded for candidate().
  std::vector<z3::expr> new_element(int index) {
    std::vector<z3::expr> element;
    for (size_t k = 0; k < monoid_.elements.size(); ++k) {
      const Component &c = monoid_.elements[k];
      element.push_back(encoder_.unknown(fmt::format("x{}.{}", index, c.name), c.type));
      if (k < monoid_.element_domains.size()) constrain(element.back(), c.type, monoid_.element_domains[k]);
    }
    elements_.push_back(element);
    return element;
  }

  void constrain(const z3::expr &x, const Type &t, const Domain &d) {
    if (t.is_float()) {
      if (d.lo) constraints_.push_back(x >= encoder_.constant(t, *d.lo));
      if (d.hi) constraints_.push_back(x <= encoder_.constant(t, *d.hi));
      if (d.integral) constraints_.push_back(z3::is_int(x));
      return;
    }
    if (t.is_bool()) return;
    auto in_type = [&](double bound) {
      const double lo = t.is_int() ? -std::ldexp(1.0, t.bits() - 1) : 0.0;
      const double hi = std::ldexp(1.0, t.is_int() ? t.bits() - 1 : t.bits()) - 1;
      return std::clamp(bound, lo, hi);
    };
    if (d.lo) {
      const z3::expr lo = encoder_.constant(t, in_type(*d.lo));
      constraints_.push_back(t.is_int() ? x >= lo : z3::uge(x, lo));
    }
    if (d.hi) {
      const z3::expr hi = encoder_.constant(t, in_type(*d.hi));
      constraints_.push_back(t.is_int() ? x <= hi : z3::ule(x, hi));
    }
  }

  void bind_element(const std::vector<z3::expr> &element) {
    const State x = monoid_.element();
    for (size_t k = 0; k < element.size(); ++k) encoder_.bind(variable_name(x, k), element[k]);
  }

  std::vector<z3::expr> unknown_state(const std::string &prefix) {
    std::vector<z3::expr> out;
    for (const Component &c : monoid_.state) out.push_back(encoder_.unknown(prefix + c.name, c.type));
    return out;
  }

  // The user's step from `state`, or from the identity (simplified first, as in with_identity()).
  std::vector<z3::expr> step(const std::optional<std::vector<z3::expr>> &state) {
    const State s = monoid_.one();
    Substitution put_identity;
    if (!state)
      put_identity.bind(s, monoid_.identity);
    else
      for (size_t k = 0; k < state->size(); ++k) encoder_.bind(variable_name(s, k), (*state)[k]);
    std::vector<z3::expr> out;
    for (const Expr &e : monoid_.step)
      out.push_back(encoder_.encode(state ? Halide::Expr(e) : simplified(put_identity(e))));
    return out;
  }

  static std::string variable_name(const State &s, size_t k) {
    return s.vars()[k].as<Halide::Internal::Variable>()->name;
  }

  std::vector<z3::expr> combine(const std::vector<z3::expr> &a, const std::vector<z3::expr> &b) {
    const State lhs = monoid_.lhs(), rhs = monoid_.rhs();
    for (size_t k = 0; k < a.size(); ++k) {
      encoder_.bind(variable_name(lhs, k), a[k]);
      encoder_.bind(variable_name(rhs, k), b[k]);
    }
    std::vector<z3::expr> out;
    for (const Expr &e : monoid_.combine) out.push_back(encoder_.encode(e));
    return out;
  }

  // combine with the identity on one side, simplified first, so that an infinite identity (of max, say)
  // that the simplifier removes (max(-inf, x) = x) does not stop the encoding.
  std::vector<z3::expr> with_identity(const std::vector<z3::expr> &a, bool identity_left) {
    Substitution put_identity;
    put_identity.bind(identity_left ? monoid_.lhs() : monoid_.rhs(), monoid_.identity);
    const State other = identity_left ? monoid_.rhs() : monoid_.lhs();
    for (size_t k = 0; k < a.size(); ++k) encoder_.bind(variable_name(other, k), a[k]);
    std::vector<z3::expr> out;
    for (const Expr &e : monoid_.combine) out.push_back(encoder_.encode(simplified(put_identity(e))));
    return out;
  }

  Sides sides(Law law, bool over_lifts) {
    elements_.clear();
    constraints_.clear();
    if (law == Law::user_step) {
      // step(s, x) == s . step(e, x); over lifts, s is the user's fold of one element.
      std::optional<std::vector<z3::expr>> s;
      if (over_lifts) {
        bind_element(new_element(0));
        s = step(std::nullopt);
      } else {
        s = unknown_state("s.");
      }
      const std::vector<z3::expr> x = new_element(1);
      bind_element(x);
      const std::vector<z3::expr> stepped = step(s);
      bind_element(x);
      const std::vector<z3::expr> step_of_x = step(std::nullopt);
      return {stepped, combine(*s, step_of_x)};
    }
    if (law == Law::commutativity) {
      const auto a = state_terms(0, over_lifts), b = state_terms(1, over_lifts);
      return {combine(a, b), combine(b, a)};
    }
    if (law == Law::associativity) {
      const auto a = state_terms(0, over_lifts), b = state_terms(1, over_lifts),
                 c = state_terms(2, over_lifts);
      return {combine(combine(a, b), c), combine(a, combine(b, c))};
    }
    const auto a = state_terms(0, over_lifts);
    return {with_identity(a, law == Law::left_identity), a};
  }

  z3::check_result violated(Law law, bool over_lifts) {
    const Sides s = sides(law, over_lifts);
    z3::expr differs = context_.bool_val(false);
    for (size_t k = 0; k < s.lhs.size(); ++k) differs = differs || s.lhs[k] != s.rhs[k];
    solver_.emplace(context_);
    z3::params p(context_);
    p.set("timeout", timeout_ms_);
    solver_->set(p);
    solver_->add(differs);
    for (size_t k = 0; k < parameters_.size(); ++k)
      if (auto d = monoid_.parameter_domains.find(parameters_[k].name); d != monoid_.parameter_domains.end())
        constrain(parameter_terms_[k], parameters_[k].type, d->second);
    for (const z3::expr &c : constraints_) solver_->add(c);
    return solver_->check();
  }

  // The elements of the last satisfiable query over lifts, rounded to their types: lifted in double for a
  // law on states; for the user's step, a list of two elements split after the first, an instance of the
  // homomorphism of the user's fold.
  Instance candidate(Law law, ParameterValues &parameters) {
    const z3::model model = solver_->get_model();
    for (size_t k = 0; k < parameters_.size(); ++k) {
      const Type &t = parameters_[k].type;
      const auto v = static_cast<double>(SmtEncoder::value_of(model, parameter_terms_[k], t));
      parameters[parameters_[k].name] = t.is_float() ? round_to_type(t, v) : v;
    }
    const MonoidEvaluator exact(parameters_.empty() ? monoid_ : with_parameter_values(monoid_, parameters),
                                Arithmetic::exact);
    Instance instance;
    for (const auto &element : elements_) {
      Values x;
      for (size_t k = 0; k < element.size(); ++k) {
        const Type &t = monoid_.elements[k].type;
        const long double v = SmtEncoder::value_of(model, element[k], t);
        x.push_back(t.is_float() ? round_to_type(t, static_cast<double>(v)) : v);
      }
      if (law == Law::user_step)
        instance.elements.push_back(x);
      else
        instance.states.push_back(exact.lift(x));
    }
    if (law == Law::user_step) instance.split = 1;
    return instance;
  }

  const Monoid &monoid_;
  z3::context context_;
  SmtEncoder encoder_;
  unsigned timeout_ms_;
  std::optional<z3::solver> solver_;
  std::vector<std::vector<z3::expr>> elements_;
  std::vector<z3::expr> constraints_;
  std::vector<Component> parameters_;
  std::vector<z3::expr> parameter_terms_;
};

}  // namespace

bool SmtProof::proved() const {
  if (laws.empty()) return false;
  for (const SmtLawResult &r : laws)
    if (!r.proved) return false;
  return true;
}

SmtLawResult prove_commutativity_with_smt(const Monoid &m, unsigned timeout_ms) {
  return LawQueries(m, timeout_ms).ask(Law::commutativity);
}

SmtProof prove_with_smt(const Monoid &m, unsigned timeout_ms) {
  SmtProof proof;
  for (const Component &c : m.state) proof.has_floating_point |= c.type.is_float();
  LawQueries queries(m, timeout_ms);
  for (Law law : {Law::associativity, Law::left_identity, Law::right_identity})
    proof.laws.push_back(queries.ask(law));
  if (!m.step.empty()) proof.laws.push_back(queries.ask(Law::user_step));
  return proof;
}

}  // namespace twist::algebra
