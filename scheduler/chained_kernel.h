#pragma once
// A reduction fed by a contraction computed at its tile: O(.., i, d) = reduce(M, j, f(S(.., i, j)), V(j, d))
// with S = sum over k of A(i, k) * B(j, k) scheduled compute_at(O, jo). Attention is the example (S the
// scores, M the online-softmax monoid), but nothing here knows it: the kernel is built from M's relative form
// (algebra/relative_form.h) and the program's expressions.
//
// Per key tile and per warp, S is reduced by matrix atoms into accumulator registers; the elements f(S) are
// evaluated where S's accumulators sit; M's selector components (the running max) reduce over the tile in
// registers and across the four lanes that share a row; the reference moves and the additive components are
// rebased from M's rebase; the additive components that do not depend on d (the softmax denominator) are
// summed in registers, and the one that does factors as (row part) x V(j, d): its row part is converted from
// S's accumulator layout into the A fragments of a second atom, whose B fragments are V's staged tile.
//
// The consumer's atom picks the datapath: mma.m16n8k16 (ldmatrix fragments of cp.async stages), or wgmma
// (MatrixAtom::wgmma, sm_90a: Q once and K, V through a TMA ring of mbarrier slots, S from two descriptors,
// P V with P from registers; chained_hopper.cpp). The tile's update above is the same for both.
#include "scheduler/reduction_kernel.h"

namespace twist {

struct ChainedKernelRequest {
  ReductionKernelRequest consumer;  // O, its output (or fused pure output), its schedule
  Func producer;                    // S
  const FuncSchedule *producer_schedule = nullptr;
};

Kernel build_chained_kernel(const ChainedKernelRequest &request);

}  // namespace twist
