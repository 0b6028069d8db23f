#pragma once
// What the library knows about the monoids it built, kept beside them because lang/monoid.h records only
// the definition:
// - which monoids are the library's own: level 1 of the checker accepts a monoid that says
//   Origin::builtin only if it is one of these, so a hand-written combine cannot declare itself proved;
// - which reference rule a monoid with a reference twist uses (psi(s; r), psi^-1(b; r) and the choice of r
//   from the two operands): Monoid::Twist has no field for the rule, and the relative form needs it. It is
//   kept per monoid (by structural key and component names), since two monoids may share a twist and
//   choose r differently, which shows in their combines.
#include <optional>

#include "lang/monoid.h"

namespace twist::algebra {

// Records m (by its structural key) as built by the library; returns m.
Monoid register_library_monoid(Monoid m);
bool is_library_monoid(const Monoid &m);

// The reference of a twist: its type and the rule that picks it from the two operands of a combine, an
// expression over the twisted state's "a.<name>" and "b.<name>" (softmax: max(a.m, b.m)).
struct ReferenceRule {
  Type type;
  Expr rule;
};
void register_reference_rule(const Monoid &m, const ReferenceRule &rule);
std::optional<ReferenceRule> reference_rule(const Monoid &m);

}  // namespace twist::algebra
