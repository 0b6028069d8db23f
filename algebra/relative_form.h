#pragma once
// The relative form of a monoid: what the scheduler's lowering keeps inside a tile.
//
// A monoid whose base (directly, or through a twist) is componentwise: each base component is either a
// selector (combined by max or min, idempotent) or additive (combined by +). Inside a tile the lowering
// keeps a partial state as base components relative to one reference value `ref`: selectors reduce as
// they are, additive components become plain sums of per-element contributions (so
// sum_j exp(s_j - ref) * v_j is a contraction a tensor core can do), and when the reference moves,
// additive components are rebased.
//
// A tile of elements x_1 .. x_T is absorbed into a relative state (b, ref) in four steps:
//   1. the selectors: b.k = op_k(b.k, relative_lift_k(x_j)) over the tile (they do not read ref);
//   2. the new reference: ref' = reference_of(b, ref), with the selectors already updated (softmax: the new
//      running max);
//   3. the additive components move to it: b.k = rebase_k(b, ref.old = ref, ref.new = ref'), where b is
//      the state before step 1 (rebase reads a consistent state: for softmax the old max);
//   4. the tile's contributions are added: b.k += sum_j relative_lift_k(x_j; ref').
// The state is to_state(b; ref) at the end. An empty state is the base identity relative to
// initial_reference. Because the combine does not depend on the reference, any ref gives the same state up
// to rounding; reference_of is the one that keeps every rescale factor at most 1.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lang/monoid.h"

namespace twist::algebra {

struct RelativeForm {
  enum class BaseOp { max, min, add };

  std::shared_ptr<const Monoid> monoid;
  std::vector<Component> base;  // the base carrier
  std::vector<BaseOp> ops;      // one per base component
  std::vector<Expr> base_identity;
  bool has_reference = false;
  Type ref_type;                    // the reference's type, when there is one
  Expr initial_reference;           // the reference of an empty state (a constant); undefined without one
  std::vector<Expr> relative_lift;  // per base component, over element vars "x.<name>" and Variable "ref"
  Expr reference_of;  // over base vars "b.<name>" and "ref" (softmax: b.m); undefined without one
  // The selector k when reference_of is b.<k> itself (softmax: the running max). The reference then always
  // equals b.<k>: it starts at reference_of(identity) = identity_k and moves to the updated b.<k> with every
  // tile, so a lowering keeps no reference of its own and reads b.<k> (before the tile's update, for
  // ref.old) wherever the forms below read it. -1 otherwise.
  int reference_selector = -1;
  std::vector<Expr> rebase;      // per base component, over "b.<name>", "ref.old", "ref.new": its value
                                 // relative to ref.new (selectors: unchanged)
  std::vector<Expr> to_state;    // psi^-1: the monoid state from base vars "b.<name>" and "ref"
  std::vector<Expr> from_state;  // psi: base components from state vars "s.<name>" and "ref"

  bool is_selector(int k) const { return ops[k] != BaseOp::add; }
  State base_vars() const { return State("b.", base); }
};

inline constexpr const char *kOldReferenceName = "ref.old";
inline constexpr const char *kNewReferenceName = "ref.new";

// nullopt when m has no such form (argmax, affine, product, a twist over a base that is not componentwise
// max/min/+, a twist whose reference rule is unknown); `why`, when given, says which.
std::optional<RelativeForm> relative_form(const Monoid &m, std::string *why = nullptr);

}  // namespace twist::algebra
