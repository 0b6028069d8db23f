#include "algebra/legality.h"

#include "lang/error.h"

namespace twist::algebra {

std::string ReassociationApproval::to_string() const {
  if (override_)
    return fmt::format("{}: monoid '{}' reassociated on the user's word: {}", what, monoid,
                       override_->reason);
  return fmt::format("{}: monoid '{}' is {} ({}): {}", what, monoid, verdict.property,
                     level_name(verdict.level), verdict.reason);
}

namespace {

std::optional<ReassociationApproval> overridden(const Monoid &m, const std::string &what,
                                                const std::optional<AssociativityOverride> &override_) {
  if (!override_) return std::nullopt;
  if (override_->reason.empty())
    fail("{}: an AssociativityOverride for monoid '{}' needs a reason; it is recorded with the schedule",
         what, m.name);
  Verdict v{true, Level::user_override, m.name, "asserted by the user: " + override_->reason,
            {},   std::nullopt};
  return ReassociationApproval{what, m.name, std::move(v), override_};
}

}  // namespace

ReassociationApproval require_reassociable(const Monoid &m, const std::string &what,
                                           const std::optional<AssociativityOverride> &override_,
                                           const CheckOptions &options) {
  if (auto approval = overridden(m, what, override_)) return *approval;
  Verdict v = check_associativity(m, options);
  if (!v.accepted)
    fail(
        "{} reorders the reduction over monoid '{}', which is legal only for an associative combine, and the "
        "checker does not accept this one:\n{}\nFix the combine; or, if its elements never take the values "
        "of "
        "the counterexample, declare their domain with MonoidBuilder::domain; or, if you know it is "
        "associative for the inputs this program sees, say so and why on the reduction's schedule with "
        "FuncSchedule::assume_associative(\"why\") (which passes an AssociativityOverride here).",
        what, m.name, v.to_string());
  return ReassociationApproval{what, m.name, std::move(v), std::nullopt};
}

ReassociationApproval require_reorderable(const Monoid &m, const std::string &what,
                                          const std::optional<AssociativityOverride> &override_,
                                          const CheckOptions &options) {
  if (auto approval = overridden(m, what, override_)) return *approval;
  const ReassociationApproval associative = require_reassociable(m, what, override_, options);
  Verdict v = check_commutativity(m, options);
  if (!v.accepted)
    fail(
        "{} folds the points of the reduction over monoid '{}' out of their order, which is legal only for a "
        "combine that commutes as well as associates, and the checker does not accept this one as "
        "commutative:\n{}\nKeep the reduction loops in their order (and points in contiguous runs); or fix "
        "the "
        "combine; or, if you know the order does not matter for the inputs this program sees, say so and why "
        "on the reduction's schedule with FuncSchedule::assume_associative(\"why\").",
        what, m.name, v.to_string());
  v.property = "associative and commutative";
  v.reason =
      fmt::format("associative ({}); commutative: {}", level_name(associative.verdict.level), v.reason);
  return ReassociationApproval{what, m.name, std::move(v), std::nullopt};
}

}  // namespace twist::algebra
