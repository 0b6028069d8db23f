#include "algebra/smt_proof.h"

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
  LawQueries(const Monoid& m, unsigned timeout_ms) : monoid_(m), encoder_(context_), timeout_ms_(timeout_ms) {}

  SmtLawResult ask(Law law) {
    SmtLawResult result{.law = law};
    try {
      const z3::check_result everywhere = violated(law, /*over_lifts=*/false);
      if (everywhere == z3::unsat) {
        result.proved = true;
        result.finding = "proved for every state";
        return result;
      }
      const std::string first = everywhere == z3::sat ? "violated by some state (perhaps unreachable)"
                                                      : "undecided for every state in the time limit";
      const z3::check_result lifted = violated(law, /*over_lifts=*/true);
      if (lifted == z3::sat) {
        result.candidate = candidate();
        result.finding = first + "; violated by lifts of elements in the model";
      } else {
        result.finding = first + (lifted == z3::unsat ? "; holds on lifts of single elements"
                                                      : "; undecided on lifts in the time limit");
      }
    } catch (const NotEncodable& e) {
      result.finding = fmt::format("not encoded: {}", e.what());
    } catch (const z3::exception& e) {
      result.finding = fmt::format("not decided: Z3 said {}", e.msg());
    }
    return result;
  }

 private:
  // Unknown states a, b, c; over lifts, each is the lift of unknown elements x0, x1, x2 instead.
  std::vector<z3::expr> state_terms(int index, bool over_lifts) {
    if (!over_lifts) {
      std::vector<z3::expr> out;
      for (const Component& c : monoid_.state)
        out.push_back(encoder_.unknown(fmt::format("s{}.{}", index, c.name), c.type));
      return out;
    }
    const State x = monoid_.element();
    std::vector<z3::expr> element;
    for (size_t k = 0; k < monoid_.elements.size(); ++k) {
      element.push_back(encoder_.unknown(fmt::format("x{}.{}", index, monoid_.elements[k].name),
                                         monoid_.elements[k].type));
      encoder_.bind(variable_name(x, k), element.back());
    }
    elements_.push_back(element);
    std::vector<z3::expr> lifted;
    for (const Expr& e : monoid_.lift) lifted.push_back(encoder_.encode(e));
    return lifted;
  }

  static std::string variable_name(const State& s, size_t k) {
    return s.vars()[k].as<Halide::Internal::Variable>()->name;
  }

  std::vector<z3::expr> combine(const std::vector<z3::expr>& a, const std::vector<z3::expr>& b) {
    const State lhs = monoid_.lhs(), rhs = monoid_.rhs();
    for (size_t k = 0; k < a.size(); ++k) {
      encoder_.bind(variable_name(lhs, k), a[k]);
      encoder_.bind(variable_name(rhs, k), b[k]);
    }
    std::vector<z3::expr> out;
    for (const Expr& e : monoid_.combine) out.push_back(encoder_.encode(e));
    return out;
  }

  // combine with the identity on one side, simplified first, so that an infinite identity (of max, say)
  // that the simplifier removes (max(-inf, x) = x) does not stop the encoding.
  std::vector<z3::expr> with_identity(const std::vector<z3::expr>& a, bool identity_left) {
    Substitution put_identity;
    put_identity.bind(identity_left ? monoid_.lhs() : monoid_.rhs(), monoid_.identity);
    const State other = identity_left ? monoid_.rhs() : monoid_.lhs();
    for (size_t k = 0; k < a.size(); ++k) encoder_.bind(variable_name(other, k), a[k]);
    std::vector<z3::expr> out;
    for (const Expr& e : monoid_.combine) out.push_back(encoder_.encode(simplified(put_identity(e))));
    return out;
  }

  Sides sides(Law law, bool over_lifts) {
    elements_.clear();
    if (law == Law::associativity) {
      const auto a = state_terms(0, over_lifts), b = state_terms(1, over_lifts), c = state_terms(2, over_lifts);
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
    return solver_->check();
  }

  // The elements of the last satisfiable query over lifts, rounded to their types, lifted in double.
  Instance candidate() {
    const z3::model model = solver_->get_model();
    const MonoidEvaluator exact(monoid_, Arithmetic::exact);
    Instance instance;
    for (const auto& element : elements_) {
      Values x;
      for (size_t k = 0; k < element.size(); ++k) {
        const Type& t = monoid_.elements[k].type;
        const long double v = SmtEncoder::value_of(model, element[k], t);
        x.push_back(t.is_float() ? round_to_type(t, static_cast<double>(v)) : v);
      }
      instance.states.push_back(exact.lift(x));
    }
    return instance;
  }

  const Monoid& monoid_;
  z3::context context_;
  SmtEncoder encoder_;
  unsigned timeout_ms_;
  std::optional<z3::solver> solver_;
  std::vector<std::vector<z3::expr>> elements_;
};

}  // namespace

bool SmtProof::proved() const {
  if (laws.empty()) return false;
  for (const SmtLawResult& r : laws)
    if (!r.proved) return false;
  return true;
}

SmtProof prove_with_smt(const Monoid& m, unsigned timeout_ms) {
  SmtProof proof;
  for (const Component& c : m.state) proof.has_floating_point |= c.type.is_float();
  LawQueries queries(m, timeout_ms);
  for (Law law : {Law::associativity, Law::left_identity, Law::right_identity}) proof.laws.push_back(queries.ask(law));
  return proof;
}

}  // namespace twist::algebra
