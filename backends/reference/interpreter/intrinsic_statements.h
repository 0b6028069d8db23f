#pragma once
// The compilers of the twist intrinsics (scheduler/intrinsics.h), one file per family.
#include "backends/reference/interpreter/statement_compiler.h"
#include "scheduler/intrinsics.h"

namespace twist::reference::interpreter {

// barrier_and_atomics.cpp
// The block-wide barrier (__syncthreads, barrier 0 over every thread).
Exec compile_block_barrier(StatementCompiler &sc, Where where);
// bar.sync and bar.arrive on a named barrier, whose id each warpgroup may compute.
Exec compile_named_barrier(StatementCompiler &sc, const intrinsic::NamedBarrier &op, Where where);
// barrier.cluster.arrive + wait: every thread of every block of the cluster.
Exec compile_cluster_sync(StatementCompiler &sc, Where where);
Exec compile_atomic_add(StatementCompiler &sc, const intrinsic::AtomicAdd &op, Where where);
Exec compile_threadfence(StatementCompiler &sc, Where where);
Exec compile_arrival_ticket(StatementCompiler &sc, const intrinsic::ArrivalTicket &op, Where where);

// copies.cpp
Exec compile_copy(StatementCompiler &sc, const intrinsic::Copy &op, Where where);
Exec compile_async_commit(StatementCompiler &sc, Where where);
Exec compile_async_wait(StatementCompiler &sc, int pending, Where where);

// warp_intrinsics.cpp
Exec compile_matrix_move(StatementCompiler &sc, const intrinsic::MatrixMove &op, Where where);
Exec compile_mma(StatementCompiler &sc, const intrinsic::Mma &op, Where where);
Exec compile_shuffle_xor(StatementCompiler &sc, const intrinsic::ShuffleXor &op, Where where);

// hopper_intrinsics.cpp: mbarriers, TMA copies, wgmma. fence.proxy.async is a no-op here: the interpreter
// does not tell the generic proxy from the asynchronous one.
Exec compile_mbarrier(StatementCompiler &sc, const intrinsic::MbarrierOp &op, Where where);
Exec compile_tma_copy(StatementCompiler &sc, const intrinsic::TmaCopy &op, Where where);
Exec compile_wgmma(StatementCompiler &sc, const intrinsic::Wgmma &op, Where where);
// The groups that wgmma and TMA stores hold their operands in, committed and waited for alike.
enum class HeldKind { wgmma, bulk_store };
Exec compile_held_commit(StatementCompiler &sc, HeldKind kind, Where where);
Exec compile_held_wait(StatementCompiler &sc, HeldKind kind, int pending, Where where);
// wgmma.fence and setmaxnreg: checked to run on whole warpgroups, nothing else to do on the CPU.
Exec compile_warpgroup_sync(StatementCompiler &sc, const char *instruction, Where where);

}  // namespace twist::reference::interpreter
