#pragma once
// The compilers of the twist intrinsics (scheduler/intrinsics.h), one file per family.
#include "backends/reference/interpreter/statement_compiler.h"
#include "scheduler/intrinsics.h"

namespace twist::reference::interpreter {

// barrier_and_atomics.cpp
Exec compile_barrier(StatementCompiler& sc, Where where);
Exec compile_atomic_add(StatementCompiler& sc, const intrinsic::AtomicAdd& op, Where where);

// copies.cpp
Exec compile_copy(StatementCompiler& sc, const intrinsic::Copy& op, Where where);
Exec compile_async_commit(StatementCompiler& sc, Where where);
Exec compile_async_wait(StatementCompiler& sc, int pending, Where where);

// warp_intrinsics.cpp
Exec compile_ldmatrix(StatementCompiler& sc, const intrinsic::Ldmatrix& op, Where where);
Exec compile_mma(StatementCompiler& sc, const intrinsic::Mma& op, Where where);
Exec compile_shuffle_xor(StatementCompiler& sc, const intrinsic::ShuffleXor& op, Where where);

}  // namespace twist::reference::interpreter
