#pragma once
// The scheduler's question: may this reduction be reordered or split? A schedule primitive that
// reassociates a reduction (split_reduction / rfactor, a tree inside a CTA, split-K, any tile order) asks
// here before it changes anything, and stores the approval it gets back.
#include <optional>
#include <string>

#include "algebra/check.h"

namespace twist::algebra {

// The user's explicit assertion that a reduction may be reassociated although the checker did not accept
// it (like Halide's atomic(/*override_associativity_test=*/true)). The reason is recorded with the schedule.
struct AssociativityOverride {
  std::string reason;
};

// What the schedule records for each reassociated reduction.
struct ReassociationApproval {
  std::string what;    // the primitive and its target, e.g. "split_reduction of C over k"
  std::string monoid;  // the monoid's name
  Verdict verdict;     // the checker's verdict, or one of Level::user_override when overridden
  std::optional<AssociativityOverride> override_;  // set when the user overrode the checker

  bool overridden() const { return override_.has_value(); }
  std::string to_string() const;  // one line: "split_reduction of C over k: softmax_f32 ... (level 1, ...)"
};

// Approves reassociating a reduction over m, or throws twist::Error with the checker's verdict and its
// counterexample, naming `what` and saying how to override. With an override the checker is not run and
// the approval records the override and its reason. Verdicts are cached per monoid, so asking again is
// cheap.
ReassociationApproval require_reassociable(const Monoid &m, const std::string &what,
                                           const std::optional<AssociativityOverride> &override_ = {},
                                           const CheckOptions &options = {});

// Approves folding the points of a reduction over m out of their order (`what` says how: a reorder of its
// reduction loops, a tree that deals points to threads in turn), which needs a . b == b . a besides
// associativity; or throws twist::Error with the commutativity verdict and its counterexample, naming
// `what`. The override is the same as require_reassociable's: the user's word that the reduction may be
// reordered.
ReassociationApproval require_reorderable(const Monoid &m, const std::string &what,
                                          const std::optional<AssociativityOverride> &override_ = {},
                                          const CheckOptions &options = {});

}  // namespace twist::algebra
