#pragma once
// The SMT level of the checker: the monoid laws as Z3 queries over the exact encoding of
// algebra/smt_encoding.h.
//
// Each law is asked twice. First over every state (every bit pattern of an integer component, every real
// number of a floating-point one): no violation means the law is proved, for the reachable states among
// them. A violation there may be a state no fold reaches (a count of -3), so it proves nothing; the law is
// then asked over lifts of single elements, which every schedule reaches, and a violation there is a
// candidate counterexample (for the user's step, Monoid::step, the law asked is step(s, x) == s . step(e,
// x), which with associativity and the identity makes the user's fold a homomorphism; its candidate is a
// list of two elements where that homomorphism fails): its elements, inside their declared domains, are
// rounded to their types and it is reported only once the
// evaluator confirms it in extended and double arithmetic (LawTester::check), since a real-number model
// may divide by zero or disagree by less than rounding. Each query is limited in time; "unknown" decides
// nothing. The monoid's Params (Monoid::parameters) are unknowns too, inside their declared domains, so a
// proof holds for every value of them and a candidate names the values (SmtLawResult::parameters).
#include <optional>
#include <string>
#include <vector>

#include "algebra/laws.h"
#include "algebra/parameters.h"

namespace twist::algebra {

struct SmtLawResult {
  Law law;
  bool proved = false;
  std::string finding = {};                // one line: what the solver said, or why the law was not asked
  std::optional<Instance> candidate = {};  // lifts that violate the law in the model, to be confirmed
  ParameterValues parameters = {};         // the monoid's Params in that model
};

struct SmtProof {
  std::vector<SmtLawResult> laws;   // associativity, left identity, right identity, the user's step if given
  bool has_floating_point = false;  // proved over the reals, i.e. for the exact operation

  bool proved() const;
};

// Throws nothing: what cannot be encoded or decided in time is reported as unproved.
SmtProof prove_with_smt(const Monoid &m, unsigned timeout_ms);
// Commutativity, a . b == b . a, asked the same way (over every state, then over lifts for a candidate).
SmtLawResult prove_commutativity_with_smt(const Monoid &m, unsigned timeout_ms);

}  // namespace twist::algebra
