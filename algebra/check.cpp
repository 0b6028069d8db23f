#include "algebra/check.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "algebra/builtins.h"
#include "algebra/halide_proof.h"
#include "algebra/laws.h"
#include "algebra/parameters.h"
#include "algebra/provenance.h"
#include "algebra/smt_proof.h"
#include "algebra/structural_key.h"
#include "algebra/twist.h"
#include "lang/error.h"

namespace twist::algebra {

namespace {

bool proved(const Verdict &v) {
  return v.accepted && v.level <= Level::smt;
}

Verdict accept(const Monoid &m, Level level, std::string reason, std::vector<std::string> notes) {
  return Verdict{true, level, m.name, std::move(reason), std::move(notes), std::nullopt};
}

// Refused with a counterexample (by `level`), or undecided without one.
Verdict refuse(const Monoid &m, std::string reason, std::vector<std::string> notes,
               std::optional<Counterexample> counterexample, Level level = Level::tested) {
  return Verdict{false, level, m.name, std::move(reason), std::move(notes), std::move(counterexample)};
}

// The first failed law of a set, if any; every law's summary is noted.
const LawResult *first_failure(const std::vector<LawResult> &results, int trials,
                               std::vector<std::string> &notes) {
  const LawResult *failed = nullptr;
  for (const LawResult &r : results) {
    notes.push_back(r.summary());
    if (!failed && !r.passed(trials)) failed = &r;
  }
  return failed;
}

// The factors of a monoid that says it is a product, if it is the componentwise product of them; otherwise
// notes that it is not.
std::optional<std::vector<Monoid>> factors_of(const Monoid &m, std::vector<std::string> &notes) {
  std::vector<Monoid> factors;
  for (const auto &f : m.factors) factors.push_back(*f);
  std::vector<std::string> names;
  for (const Component &c : m.state) names.push_back(c.name);
  if (factors.empty() || structural_key(product(factors, names)) != structural_key(m)) {
    notes.push_back("says it is a product, but it is not the componentwise product of its factors");
    return std::nullopt;
  }
  return factors;
}

// Level 1. Returns a verdict when the construction proves the monoid associative; otherwise notes why not.
std::optional<Verdict> by_construction(const Monoid &m, const CheckOptions &options,
                                       std::vector<std::string> &notes) {
  switch (m.origin) {
    case Monoid::Origin::builtin:
      if (is_library_monoid(m))
        return accept(m, Level::construction, "the library's monoid, associative by construction", notes);
      notes.push_back(
          "says it is built in, but it is not one of the library's monoids (its expressions differ), "
          "so it is checked like a user's");
      return std::nullopt;
    case Monoid::Origin::product: {
      const std::optional<std::vector<Monoid>> product_of = factors_of(m, notes);
      if (!product_of) return std::nullopt;
      const std::vector<Monoid> &factors = *product_of;
      std::string reason = "the componentwise product of proved factors:";
      for (const Monoid &f : factors) {
        const Verdict v = check_associativity(f, options);
        if (!proved(v)) {
          notes.push_back(fmt::format("factor '{}' is not proved ({}), so the product is checked as a whole",
                                      f.name, v.accepted ? level_name(v.level) : "not accepted"));
          return std::nullopt;
        }
        reason += fmt::format(" '{}' ({})", f.name, level_name(v.level));
      }
      return accept(m, Level::construction, reason, notes);
    }
    case Monoid::Origin::twisted:
    case Monoid::Origin::derived:
    case Monoid::Origin::user:
      break;
  }
  if (!m.twist) {
    if (m.origin == Monoid::Origin::twisted) notes.push_back("says it is twisted, but records no twist");
    return std::nullopt;
  }
  const Monoid &base = *m.twist->base;
  const Verdict base_verdict = check_associativity(base, options);
  if (!proved(base_verdict)) {
    notes.push_back(fmt::format("its twist's base '{}' is not proved ({})", base.name,
                                base_verdict.accepted ? level_name(base_verdict.level) : "not accepted"));
    return std::nullopt;
  }
  LawTester tester(m, options);
  const bool has_reference = reference_type(*m.twist).has_value();
  std::vector<std::string> twist_notes;
  const std::vector<LawResult> premises = tester.twist_premises();
  if (const LawResult *failed = first_failure(premises, options.trials, twist_notes)) {
    notes.push_back(fmt::format(
        "its twist over '{}' does not prove it: {}{}", base.name, failed->summary(),
        failed->law == Law::transport && has_reference ? " (the combine depends on the reference r)" : ""));
    if (failed->counterexample) notes.push_back(failed->counterexample->to_string());
    return std::nullopt;
  }
  notes.insert(notes.end(), twist_notes.begin(), twist_notes.end());
  return accept(m, Level::construction,
                fmt::format("transported from the proved base '{}' through a bijection psi{}", base.name,
                            has_reference ? ", independent of the reference r (tested at random r)" : ""),
                notes);
}

// Level 2.
std::optional<Verdict> by_halide(const Monoid &m, const CheckOptions &options,
                                 std::vector<std::string> &notes, std::optional<Verdict> &refuted) {
  const std::optional<HalideProof> proof = prove_with_halide(m);
  if (!proof) {
    notes.push_back("Halide's prove_associativity does not match it");
    return std::nullopt;
  }
  if (proof->identity_matches)
    return accept(m, Level::halide,
                  fmt::format("Halide matched the associative operator ({})", proof->pattern), notes);
  // Halide proves associativity only; the identity is the monoid's own claim, so it is tested.
  LawTester tester(m, options);
  std::vector<std::string> identity_notes;
  const std::vector<LawResult> laws{tester.identity_law(Law::left_identity),
                                    tester.identity_law(Law::right_identity)};
  if (const LawResult *failed = first_failure(laws, options.trials, identity_notes)) {
    notes.insert(notes.end(), identity_notes.begin(), identity_notes.end());
    if (!failed->counterexample) return std::nullopt;  // undecided here: testing decides
    refuted = refuse(
        m,
        fmt::format("Halide proves the operator ({}) associative, but the identity is wrong", proof->pattern),
        notes, failed->counterexample);
    return std::nullopt;
  }
  notes.insert(notes.end(), identity_notes.begin(), identity_notes.end());
  return accept(
      m, Level::halide,
      fmt::format("Halide matched the associative operator ({}); the identity differs from Halide's "
                  "and passed the identity laws",
                  proof->pattern),
      notes);
}

// Z3's answers do not depend on the seed or the trials, so one per structure serves every option set.
SmtProof cached_smt_proof(const Monoid &m, unsigned timeout_ms) {
  static std::mutex mutex;
  static std::map<std::string, SmtProof> proofs;
  const std::string key = fmt::format("{}|{}", timeout_ms, structural_key(m));
  {
    std::lock_guard lock(mutex);
    if (auto it = proofs.find(key); it != proofs.end()) return it->second;
  }
  SmtProof proof = prove_with_smt(m, timeout_ms);
  std::lock_guard lock(mutex);
  return proofs.emplace(key, std::move(proof)).first->second;
}

// Level 3: the laws proved over every state, or a candidate counterexample on lifts that the evaluator
// confirms. Returns the proof for level 4 to report once testing has found nothing (see decide()).
std::optional<SmtProof> by_smt(const Monoid &m, const CheckOptions &options, std::vector<std::string> &notes,
                               std::optional<Verdict> &refuted) {
  const SmtProof proof = cached_smt_proof(m, options.smt_timeout_ms);
  LawTester tester(m, options);
  for (const SmtLawResult &law : proof.laws) {
    notes.push_back(fmt::format("Z3, {}: {}", law_statement(law.law), law.finding));
    if (!law.candidate || refuted) continue;
    LawResult confirmed =
        tester.check(law.law == Law::user_step ? Law::user_homomorphism : law.law, *law.candidate);
    if (confirmed.counterexample) {
      refuted = refuse(m,
                       fmt::format("{} fails (found by Z3 on lifts of elements, confirmed by evaluation)",
                                   law_statement(law.law)),
                       notes, std::move(confirmed.counterexample), Level::smt);
    } else {
      notes.push_back(
          "  the evaluator does not confirm Z3's model (rounded to the element types, or "
          "dividing by zero), so it decides nothing");
    }
  }
  if (refuted || !proof.proved()) return std::nullopt;
  return proof;
}

std::string inconclusive_explanation() {
  return "(an instance is inconclusive where a side is NaN from infinite inputs or on both sides, both sides "
         "are the same infinity (an "
         "overflow says nothing about the combine), a side could not be evaluated (a NaN or an "
         "out-of-range value cast to an integer), or the two sides differ in only one of the extended and "
         "double arithmetics (rounding decides it))";
}

// Level 4. A proof of level 3 is reported only if testing, which also draws infinities and extreme values
// that the real-number encoding does not have, finds no counterexample.
Verdict by_testing(const Monoid &m, const CheckOptions &options, std::vector<std::string> notes,
                   const std::optional<SmtProof> &smt_proof) {
  LawTester tester(m, options);
  const std::vector<LawResult> laws = tester.monoid_laws();
  const LawResult *failed = first_failure(laws, options.trials, notes);
  if (std::any_of(laws.begin(), laws.end(), [](const LawResult &r) { return r.inconclusive > 0; }))
    notes.push_back(inconclusive_explanation());
  if (!failed) {
    if (smt_proof) {
      const std::string laws = m.step.empty() ? "associativity and the identity"
                                              : "associativity, the identity and the given step";
      return accept(
          m, Level::smt,
          smt_proof->has_floating_point
              ? fmt::format("Z3 proved {} for every state over the real numbers, i.e. for the exact "
                            "operation that the floating-point combine rounds; testing with "
                            "infinities and extreme values found no counterexample",
                            laws)
              : fmt::format("Z3 proved {} for every state, bit-exactly", laws),
          notes);
    }
    return accept(m, Level::tested,
                  fmt::format("every law held on {} random instance(s) each", options.trials), notes);
  }
  if (failed->counterexample)
    return refuse(m, fmt::format("{} fails", law_statement(failed->law)), notes, failed->counterexample);
  return refuse(
      m,
      fmt::format("undecided: only {} instance(s) of {} were conclusive, {} needed, {} inconclusive",
                  failed->conclusive, law_statement(failed->law), std::max(1, options.trials / 4),
                  failed->inconclusive),
      notes, std::nullopt);
}

// The user's step (Monoid::step) must agree with the combine whatever level proves the combine: its fold's
// homomorphism law and leftward == rightward fold, tested. A refusal if one fails with a counterexample.
std::optional<Verdict> refute_user_step(const Monoid &m, const CheckOptions &options, const Verdict &proved,
                                        std::vector<std::string> notes) {
  if (m.step.empty()) return std::nullopt;
  LawTester tester(m, options);
  const std::vector<LawResult> laws = tester.user_step_laws();
  if (const LawResult *failed = first_failure(laws, options.trials, notes); failed && failed->counterexample)
    return refuse(m,
                  fmt::format("the combine is {}, but it does not reproduce the given step: {} fails",
                              level_name(proved.level), law_statement(failed->law)),
                  notes, failed->counterexample);
  return std::nullopt;
}

// The declared domains of the elements and the Params, which every verdict relies on.
std::vector<std::string> domain_notes(const Monoid &m) {
  std::vector<std::string> notes;
  for (size_t k = 0; k < m.element_domains.size(); ++k)
    if (m.element_domains[k].restricts())
      notes.push_back(fmt::format("checked for elements with {} only, as declared",
                                  m.element_domains[k].to_string(m.elements[k].name)));
  for (const auto &[name, d] : m.parameter_domains)
    if (d.restricts())
      notes.push_back(fmt::format("checked for the Param {} only, as declared", d.to_string(name)));
  return notes;
}

constexpr int kParameterSamples = 4;

// The verdict at sampled values of the Params, renamed for m and saying where it was decided.
Verdict at_parameters(const Monoid &m, Verdict v, const ParameterValues &values,
                      std::vector<std::string> notes) {
  v.monoid = m.name;
  v.reason = fmt::format("with its Params at {}: {}", to_string(values), v.reason);
  notes.insert(notes.end(), v.notes.begin(), v.notes.end());
  v.notes = std::move(notes);
  if (v.counterexample) v.counterexample->parameters.assign(values.begin(), values.end());
  return v;
}

// A monoid that reads Params (a temperature): Z3 asks the laws for every value of them; then every level
// checks the monoid at sampled values (algebra/parameters.h), each an ordinary monoid. Accepted only if
// every sample is; the level reported is Z3's where it proved the laws for every value, otherwise the
// weakest of the samples'.
Verdict decide_with_parameters(const Monoid &m, const CheckOptions &options) {
  std::vector<std::string> notes = domain_notes(m);
  std::string read;
  for (const Component &p : m.parameters())
    read += fmt::format("{}{} ({})", read.empty() ? "" : ", ", p.name, type_name(p.type));
  notes.push_back(
      fmt::format("reads the Params {}: Z3 reasons over every value of them, the other levels over {} "
                  "sampled values",
                  read, kParameterSamples));
  bool proved_for_every_value = false;
  if (options.first_level <= Level::smt) {
    const SmtProof proof = cached_smt_proof(m, options.smt_timeout_ms);
    for (const SmtLawResult &law : proof.laws) {
      notes.push_back(fmt::format("Z3, {}: {}", law_statement(law.law), law.finding));
      if (!law.candidate) continue;
      LawTester tester(with_parameter_values(m, law.parameters), options);
      LawResult confirmed =
          tester.check(law.law == Law::user_step ? Law::user_homomorphism : law.law, *law.candidate);
      if (!confirmed.counterexample) {
        notes.push_back("  the evaluator does not confirm Z3's model, so it decides nothing");
        continue;
      }
      Verdict refused =
          refuse(m,
                 fmt::format("{} fails (found by Z3 on lifts of elements, confirmed by evaluation)",
                             law_statement(law.law)),
                 {}, std::move(confirmed.counterexample), Level::smt);
      return at_parameters(m, std::move(refused), law.parameters, notes);
    }
    proved_for_every_value = proof.proved();
  }
  Level weakest = Level::construction;
  std::vector<std::string> sampled;
  for (const ParameterValues &values : parameter_samples(m, kParameterSamples, options.seed)) {
    const Verdict v = check_associativity(with_parameter_values(m, values), options);
    if (!v.accepted) return at_parameters(m, v, values, notes);
    weakest = std::max(weakest, v.level);
    sampled.push_back(fmt::format("{} ({})", to_string(values), level_name(v.level)));
  }
  notes.push_back(fmt::format("accepted at each sampled value of its Params: {}", fmt::join(sampled, "; ")));
  if (proved_for_every_value)
    return accept(
        m, Level::smt,
        "Z3 proved associativity and the identity for every state and every value of its Params; at "
        "sampled values, every level accepted it too",
        notes);
  return accept(m, weakest,
                fmt::format("accepted at each of {} sampled values of its Params, the weakest by {}",
                            kParameterSamples, level_name(weakest)),
                notes);
}

Verdict decide(const Monoid &m, const CheckOptions &options) {
  m.validate();
  if (!m.parameters().empty()) {
    try {
      return decide_with_parameters(m, options);
    } catch (const Error &e) {
      return refuse(m, "undecided: its expressions cannot be evaluated", {e.what()}, std::nullopt);
    }
  }
  std::vector<std::string> notes = domain_notes(m);
  try {
    if (options.first_level <= Level::construction)
      if (auto v = by_construction(m, options, notes))
        return refute_user_step(m, options, *v, notes).value_or(*v);
    if (options.first_level <= Level::halide) {
      std::optional<Verdict> refuted;
      if (auto v = by_halide(m, options, notes, refuted))
        return refute_user_step(m, options, *v, notes).value_or(*v);
      if (refuted) return *refuted;
    }
    std::optional<SmtProof> smt_proof;
    if (options.first_level <= Level::smt) {
      std::optional<Verdict> refuted;
      smt_proof = by_smt(m, options, notes, refuted);
      if (refuted) return *refuted;
    }
    return by_testing(m, options, notes, smt_proof);
  } catch (const Error &e) {
    notes.push_back(e.what());
    return refuse(m, "undecided: its expressions cannot be evaluated", notes, std::nullopt);
  }
}

// Commutativity, level 1: the library's commutative monoids, products of commutative factors, and twists
// (accepted by construction) over a commutative base, since psi carries a . b == b . a over from the base.
std::optional<Verdict> commutative_by_construction(const Monoid &m, const CheckOptions &options,
                                                   std::vector<std::string> &notes) {
  auto proved_commutative = [&](const Monoid &f) {
    const Verdict v = check_commutativity(f, options);
    return v.accepted && v.level <= Level::smt;
  };
  if (m.origin == Monoid::Origin::builtin && is_library_monoid(m)) {
    if (m.commutative)
      return accept(m, Level::construction, "the library's monoid, commutative by construction", notes);
    notes.push_back("the library's monoid, which does not commute by construction");
    return std::nullopt;
  }
  if (m.origin == Monoid::Origin::product) {
    const std::optional<std::vector<Monoid>> factors = factors_of(m, notes);
    if (!factors) return std::nullopt;
    for (const Monoid &f : *factors)
      if (!proved_commutative(f)) {
        notes.push_back(fmt::format(
            "factor '{}' is not proved commutative, so the product is checked as a whole", f.name));
        return std::nullopt;
      }
    return accept(m, Level::construction, "the componentwise product of commutative factors", notes);
  }
  if (!m.twist) return std::nullopt;
  const Monoid &base = *m.twist->base;
  if (!proved_commutative(base)) {
    notes.push_back(fmt::format("its twist's base '{}' is not proved commutative", base.name));
    return std::nullopt;
  }
  const Verdict twisted = check_associativity(m, options);
  if (!twisted.accepted || twisted.level != Level::construction) {
    notes.push_back(
        "its twist does not prove it associative by construction, so psi does not carry the base's "
        "commutativity over");
    return std::nullopt;
  }
  return accept(m, Level::construction,
                fmt::format("transported through a bijection psi from the commutative base '{}'", base.name),
                notes);
}

Verdict decide_commutativity(const Monoid &m, const CheckOptions &options) {
  m.validate();
  std::vector<std::string> notes = domain_notes(m);
  try {
    if (!m.parameters().empty()) {
      // At sampled values of its Params, as for associativity (decide_with_parameters).
      Level weakest = Level::construction;
      for (const ParameterValues &values : parameter_samples(m, kParameterSamples, options.seed)) {
        const Verdict v = check_commutativity(with_parameter_values(m, values), options);
        if (!v.accepted) return at_parameters(m, v, values, notes);
        weakest = std::max(weakest, v.level);
      }
      return accept(m, weakest,
                    fmt::format("commutative at each of {} sampled values of its Params, the weakest by {}",
                                kParameterSamples, level_name(weakest)),
                    notes);
    }
    if (options.first_level <= Level::construction)
      if (auto v = commutative_by_construction(m, options, notes)) return *v;
    LawTester tester(m, options);
    bool smt_proved = false;
    if (options.first_level <= Level::smt) {
      const SmtLawResult law = prove_commutativity_with_smt(m, options.smt_timeout_ms);
      notes.push_back(fmt::format("Z3, {}: {}", law_statement(law.law), law.finding));
      smt_proved = law.proved;
      if (law.candidate) {
        LawResult confirmed = tester.check(Law::commutativity, *law.candidate);
        if (confirmed.counterexample)
          return refuse(m, "commutativity fails (found by Z3 on lifts of elements, confirmed by evaluation)",
                        notes, std::move(confirmed.counterexample), Level::smt);
        notes.push_back("  the evaluator does not confirm Z3's model, so it decides nothing");
      }
    }
    const LawResult tested = tester.commutativity_law();
    notes.push_back(tested.summary());
    if (tested.inconclusive > 0) notes.push_back(inconclusive_explanation());
    if (tested.counterexample) return refuse(m, "commutativity fails", notes, tested.counterexample);
    if (smt_proved)
      return accept(m, Level::smt,
                    "Z3 proved a . b == b . a for every state; testing found no counterexample", notes);
    if (!tested.passed(options.trials))
      return refuse(
          m,
          fmt::format("undecided: only {} instance(s) of commutativity were conclusive, {} needed, {} "
                      "inconclusive",
                      tested.conclusive, std::max(1, options.trials / 4), tested.inconclusive),
          notes, std::nullopt);
    return accept(m, Level::tested,
                  fmt::format("a . b == b . a held on {} random pairs of reachable states", options.trials),
                  notes);
  } catch (const Error &e) {
    notes.push_back(e.what());
    return refuse(m, "undecided: its expressions cannot be evaluated", notes, std::nullopt);
  }
}

struct VerdictCache {
  std::mutex mutex;
  std::map<std::string, Verdict> verdicts;
};

VerdictCache &verdict_cache() {
  static VerdictCache cache;
  return cache;
}

std::string cache_key(const Monoid &m, const CheckOptions &options) {
  return fmt::format("{}|{}|{}|{}|{}|{}|{}", options.seed, options.trials, options.max_list_length,
                     fmt::join(options.fold_lengths, ","), options.smt_timeout_ms,
                     static_cast<int>(options.first_level), structural_key(m));
}

// The verdict cached under `key`, named for `m`, or else decide_now(), cached (not under the lock: deciding a
// product or a twist checks its factors or base first).
template <typename Decide>
Verdict cached_verdict(const Monoid &m, const std::string &key, Decide decide_now) {
  VerdictCache &cache = verdict_cache();
  {
    std::lock_guard lock(cache.mutex);
    if (auto it = cache.verdicts.find(key); it != cache.verdicts.end()) {
      Verdict v = it->second;
      v.monoid = m.name;
      return v;
    }
  }
  Verdict v = decide_now();
  std::lock_guard lock(cache.mutex);
  cache.verdicts.emplace(key, v);
  return v;
}

}  // namespace

Verdict check_associativity(const Monoid &m, const CheckOptions &options) {
  return cached_verdict(m, cache_key(m, options), [&] { return decide(m, options); });
}

Verdict check_commutativity(const Monoid &m, const CheckOptions &options) {
  return cached_verdict(m, "commutativity|" + cache_key(m, options), [&] {
    Verdict v = decide_commutativity(m, options);
    v.property = "commutative";
    return v;
  });
}

bool has_cached_verdict(const Monoid &m, const CheckOptions &options) {
  VerdictCache &cache = verdict_cache();
  const std::string key = cache_key(m, options);
  std::lock_guard lock(cache.mutex);
  return cache.verdicts.count(key) > 0;
}

}  // namespace twist::algebra
