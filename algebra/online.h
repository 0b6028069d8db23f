#pragma once
// The monoids whose state is a sum relative to a reference ("online" algorithms): safe softmax,
// log-sum-exp, attention and Welford's variance. Each comes twice:
// - built in (Origin::builtin): the combine written by hand, in the form the kernels use;
// - as a twist (Origin::twisted, algebra/twist.h): the same carrier and a combine derived from the plain
//   base by psi, which is why the hand-written combine is associative.
// The built-in carries the twist's record (Monoid::Twist) too, since the relative form that lowering uses
// (algebra/relative_form.h) is read off it.
//
// Masked elements: an element whose score s is -inf contributes nothing. Every rescale is written as
// select(m == -inf, 0, exp(m - M)), so exp(-inf - -inf) counts as 0 rather than NaN, and a row whose
// scores are all -inf finalizes to 0 (attention) or keeps l == 0 (softmax), never NaN.
#include "lang/monoid.h"

namespace twist::algebra {

// (m, l): the running max m and l = sum exp(s - m). Elements: s. Identity (-inf, 0). Outputs (m, l).
Monoid softmax(const Type &t);
// The same state; output lse = m + log(l) (-inf for an empty or fully masked list).
Monoid log_sum_exp(const Type &t);
// (m, l, o_0 .. o_{w-1}) with o_k = sum exp(s - m) * v_k. Elements (s, v_0 .. v_{w-1}). Identity
// (-inf, 0, 0 ..). Outputs out_k = o_k / l, and 0 where l == 0 (a fully masked row).
Monoid attention(const Type &t, int width);
// (n, mean, M2), combined as in Chan et al.: n = n1 + n2, d = mean2 - mean1, mean = mean1 + d*n2/n,
// M2 = M2_1 + M2_2 + d*d*n1*n2/n. Elements: x. Identity (0, 0, 0). Outputs (mean, variance = M2/n, 0 when
// n == 0).
Monoid welford(const Type &t);

// The twists these are: softmax, log-sum-exp and attention over the base (max, +, + ..) with
// psi(m, l, o; r) = (m, l*e^(m-r), o*e^(m-r)) and r = max(a.m, b.m); Welford over (+, +, +) with the
// shifted power sums psi(n, mean, M2; r) = (n, n*(mean - r), M2 + n*(mean - r)^2) and r = a.mean.
Monoid twisted_softmax(const Type &t);
Monoid twisted_log_sum_exp(const Type &t);
Monoid twisted_attention(const Type &t, int width);
Monoid twisted_welford(const Type &t);

}  // namespace twist::algebra
