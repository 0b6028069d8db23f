#include "algebra/verdict.h"

#include <cmath>

namespace twist::algebra {

std::string level_name(Level level) {
  switch (level) {
    case Level::construction:
      return "level 1, proved by construction";
    case Level::halide:
      return "level 2, proved by Halide's prove_associativity";
    case Level::smt:
      return "level 3, proved or refuted by the SMT solver Z3";
    case Level::tested:
      return "level 4, tested on random reachable states";
    case Level::derived:
      return "level 5, derived from a fold";
    case Level::user_override:
      return "not checked: associativity asserted by the user";
  }
  return "?";
}

std::string law_statement(Law law) {
  switch (law) {
    case Law::associativity:
      return "associativity: (a . b) . c == a . (b . c)";
    case Law::left_identity:
      return "left identity: e . a == a";
    case Law::right_identity:
      return "right identity: a . e == a";
    case Law::homomorphism:
      return "homomorphism: fold(x[0:k] ++ x[k:]) == fold(x[0:k]) . fold(x[k:])";
    case Law::fold_directions:
      return "leftward fold == rightward fold: ((e . x0) . x1) ... == x0 . (x1 . (... . e))";
    case Law::transport:
      return "transport: combine(a, b) == psi^-1(psi(a; r) (+) psi(b; r); r) for every reference r";
    case Law::state_round_trip:
      return "bijection: psi^-1(psi(s; r); r) == s";
    case Law::base_round_trip:
      return "bijection: psi(psi^-1(B; r); r) == B";
    case Law::base_identity:
      return "identity: psi(e; r) == the base's identity";
    case Law::fold_agreement:
      return "the derived monoid's fold == the given leftward fold";
    case Law::weak_right_inverse:
      return "weak right inverse: h(g(s)) == s";
    case Law::affine_step:
      return "affine step: step(s, x) == A(x) s + c(x)";
    case Law::user_homomorphism:
      return "homomorphism of the given step's fold: fold(x[0:k] ++ x[k:]) == fold(x[0:k]) . fold(x[k:])";
    case Law::user_fold_directions:
      return "the given step's fold == the rightward fold: x0 . (x1 . (... . e)), each x as step(e, x)";
    case Law::user_step:
      return "the given step is the combine: step(s, x) == s . step(e, x)";
    case Law::commutativity:
      return "commutativity: a . b == b . a";
  }
  return "?";
}

namespace {

std::string number(Real x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  if (x == 0 && std::signbit(x)) return "-0";
  return fmt::format("{:.17g}", static_cast<double>(x));
}

std::string values(const std::vector<std::string> &names, const Values &v) {
  std::string s = "(";
  for (size_t k = 0; k < v.size(); ++k)
    s += fmt::format("{}{}={}", k ? ", " : "", k < names.size() ? names[k] : fmt::format("#{}", k),
                     number(v[k]));
  return s + ")";
}

}  // namespace

std::string Counterexample::to_string() const {
  std::string s = fmt::format("counterexample to {} in '{}'\n", law_statement(law), monoid);
  static const char *const state_labels[] = {"a", "b", "c"};
  for (size_t i = 0; i < states.size(); ++i)
    s += fmt::format("  {} = {}\n", i < 3 ? state_labels[i] : "s", values(state_names, states[i]));
  if (!elements.empty() || split >= 0) {
    s += fmt::format("  x = [{} element(s)]", elements.size());
    for (size_t i = 0; i < elements.size(); ++i)
      s += fmt::format("\n    x[{}] = {}", i, values(element_names, elements[i]));
    s += "\n";
  }
  if (split >= 0) s += fmt::format("  split at k = {}\n", split);
  if (reference) s += fmt::format("  reference r = {}\n", number(*reference));
  for (const auto &[name, value] : parameters) s += fmt::format("  Param {} = {}\n", name, number(value));
  s += fmt::format("  left side  = {}\n", values(side_names, lhs));
  s += fmt::format("  right side = {}\n", values(side_names, rhs));
  const std::string name = component < static_cast<int>(side_names.size()) ? side_names[component] : "?";
  s += fmt::format("  component '{}' differs by {} (tolerance {})", name, number(difference),
                   number(tolerance));
  return s;
}

std::string Verdict::to_string() const {
  std::string s = fmt::format("monoid '{}': {} ({})\n  {}", monoid,
                              accepted ? property : "NOT accepted as " + property, level_name(level), reason);
  for (const std::string &note : notes) s += "\n  - " + note;
  if (counterexample) s += "\n" + counterexample->to_string();
  return s;
}

}  // namespace twist::algebra
