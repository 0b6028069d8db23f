#pragma once
// A structural key of a monoid: equal for two monoids exactly when they make the same claim about the
// same operation, whatever their components are called. It identifies the monoids the library built
// (algebra/provenance.h) and caches verdicts (algebra/check.h).
#include <string>

#include "lang/monoid.h"

namespace twist::algebra {

// Covers the component types, the identity, the combine, the lift (which decides the reachable states,
// and so whether a combine that is associative only on reachable states is) and the origin with what it
// rests on: the factors of a product, the base and the bijection of a twist. Component names, the
// monoid's name and its finalize do not enter it. Floating-point constants enter bit for bit.
std::string structural_key(const Monoid &m);

}  // namespace twist::algebra
