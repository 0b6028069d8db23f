#pragma once
// The library's monoids, each parameterized by the type of its state (and elements). All are built with
// MonoidBuilder, marked Origin::builtin and registered (algebra/provenance.h), so the checker accepts them
// at level 1.
//
// Identities are exact: combining with the identity returns the other state bit for bit, in every
// arithmetic, signed zeros included. That is why the additive identity of a floating-point type is -0
// (x + -0 == x for x = -0 as well, where x + 0 would give +0), and why the affine and Welford combines
// return the other operand when one operand equals the identity rather than relying on the formula (for
// the affine maps of dimension n > 1, a state that equals the identity in value but has zeros of the
// other sign comes back as the identity when combined with it on the right; every other state, and the
// identity itself, is returned bit for bit).
//
// The monoids whose state is a sum relative to a reference (softmax, log-sum-exp, attention, Welford) are
// in algebra/online.h.
#include <vector>

#include "lang/monoid.h"

namespace twist::algebra {

// (sum): x + y, identity 0 (-0 for floating point).
Monoid sum(const Type &t);
// (prod): x * y, identity 1.
Monoid product(const Type &t);
// (max): identity -inf (the type's lowest value for integers). min likewise with +inf.
Monoid max(const Type &t);
Monoid min(const Type &t);
// (value, index) of the largest (smallest) value, ties broken by the smaller index, so the combine is a
// max (min) in the lexicographic order of (value, -index): associative and commutative. Elements are
// (value, index); the index is i32. Identity (-inf, i32 max) for argmax, (+inf, i32 max) for argmin.
Monoid argmax(const Type &value_type);
Monoid argmin(const Type &value_type);
// The affine maps h -> a*h + b of a linear recurrence h = a*h + b, composed in sequence order:
// (a1, b1) then (a2, b2) = (a2*a1, a2*b1 + b2), identity (1, 0). With `dimension` n > 1 the state is
// h in t^n and the maps are h -> A h + b: components a<i>_<j> (row-major) and b<i>, and the combine is
// (A2 A1, A2 b1 + b2). Elements are maps; finalize gives the map.
Monoid affine(const Type &t, int dimension = 1);

// The componentwise product of monoids: its state, elements and outputs are the factors' concatenated,
// each component keeping its name where that is unique among the factors and otherwise suffixed with
// "_<factor index>". `state_names`, when given, renames the state components instead (one name each).
Monoid product(const std::vector<Monoid> &factors, const std::vector<std::string> &state_names = {});

// Helpers shared by the built-in families.
namespace detail {
// The additive identity of t: -0 for floating point (see the file comment), 0 otherwise.
Expr additive_identity(const Type &t);
// -inf for floating point, the lowest value for integers; highest likewise.
Expr lowest(const Type &t);
Expr highest(const Type &t);
// The combine `general`, except that an operand equal to the identity (in value), when the other is not,
// yields the other operand exactly. When both equal the identity in value (one may hold -0 where the
// other holds +0) either the general formula decides, which must then be defined there and give the
// right signed zeros, or the right operand is returned.
enum class BothIdentity { general, right_operand };
std::vector<Expr> with_exact_identity(const State &a, const State &b, const std::vector<Expr> &identity,
                                      const std::vector<Expr> &general, BothIdentity both);
// "<family>_<type>", e.g. "sum_f32".
std::string family_name(const std::string &family, const Type &t);
}  // namespace detail

}  // namespace twist::algebra
