#include "algebra/legality.h"

#include "lang/error.h"

namespace twist::algebra {

std::string ReassociationApproval::to_string() const {
  if (override_)
    return fmt::format("{}: monoid '{}' reassociated on the user's word: {}", what, monoid,
                       override_->reason);
  return fmt::format("{}: monoid '{}' is associative ({}): {}", what, monoid, level_name(verdict.level),
                     verdict.reason);
}

ReassociationApproval require_reassociable(const Monoid &m, const std::string &what,
                                           const std::optional<AssociativityOverride> &override_,
                                           const CheckOptions &options) {
  if (override_) {
    if (override_->reason.empty())
      fail("{}: an AssociativityOverride for monoid '{}' needs a reason; it is recorded with the schedule",
           what, m.name);
    Verdict v{true, Level::user_override, m.name, "asserted by the user: " + override_->reason,
              {},   std::nullopt};
    return ReassociationApproval{what, m.name, std::move(v), override_};
  }
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

}  // namespace twist::algebra
