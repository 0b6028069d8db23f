#pragma once
// Shorthands for writing loop-nest kernels by hand in the interpreter's tests: the Halide statements and
// expressions of scheduler/loop_nest.h, with the defaults a lowered kernel uses.
#include <Halide.h>

#include <string>
#include <vector>

#include "lang/error.h"
#include "scheduler/intrinsics.h"
#include "scheduler/loop_nest.h"

namespace twist::reference::testing {

// The tests write loop-nest IR, whose expressions are Halide's (twist::Expr's stricter operators are the
// front end's), so they take twist's other names one by one.
using Halide::Expr;
using Halide::Internal::Stmt;
using twist::Arithmetic;
using twist::bf16;
using twist::BufferArg;
using twist::Error;
using twist::f16;
using twist::f32;
using twist::i32;
using twist::Kernel;
using twist::LoweredProgram;
using twist::Type;

inline Expr i32_var(const std::string &name) {
  return Halide::Internal::Variable::make(Halide::Int(32), name);
}
inline Expr tid() {
  return intrinsic::thread_index();
}
inline Expr bid(int dim) {
  return intrinsic::block_index(dim);
}

inline Expr load(const Type &type, const std::string &buffer, const Expr &index) {
  return Halide::Internal::Load::make(type, buffer, index, Halide::Buffer<>(), Halide::Internal::Parameter(),
                                      Halide::Internal::const_true(), Halide::Internal::ModulusRemainder());
}

inline Stmt store(const std::string &buffer, const Expr &value, const Expr &index) {
  return Halide::Internal::Store::make(buffer, value, index, Halide::Internal::Parameter(),
                                       Halide::Internal::const_true(), Halide::Internal::ModulusRemainder());
}

inline Stmt serial(const std::string &var, const Expr &min, const Expr &extent, const Stmt &body) {
  return Halide::Internal::For::make(var, min, extent, Halide::Internal::ForType::Serial,
                                     Halide::DeviceAPI::None, body);
}

inline Stmt unrolled(const std::string &var, int extent, const Stmt &body) {
  return Halide::Internal::For::make(var, 0, extent, Halide::Internal::ForType::Unrolled,
                                     Halide::DeviceAPI::None, body);
}

inline Stmt if_then(const Expr &condition, const Stmt &then_case, const Stmt &else_case = Stmt()) {
  return Halide::Internal::IfThenElse::make(condition, then_case, else_case);
}

inline Stmt let(const std::string &var, const Expr &value, const Stmt &body) {
  return Halide::Internal::LetStmt::make(var, value, body);
}

inline Stmt shared_array(const std::string &name, const Type &type, int extent, const Stmt &body) {
  return Halide::Internal::Allocate::make(name, type, Halide::MemoryType::GPUShared, {extent},
                                          Halide::Internal::const_true(), body);
}

inline Stmt register_array(const std::string &name, const Type &type, int extent, const Stmt &body) {
  return Halide::Internal::Allocate::make(name, type, Halide::MemoryType::Register, {extent},
                                          Halide::Internal::const_true(), body);
}

inline Stmt block(const std::vector<Stmt> &stmts) {
  return Halide::Internal::Block::make(stmts);
}

inline BufferArg buffer(const std::string &name, const Type &type, std::vector<Expr> shape,
                        BufferArg::Role role) {
  return BufferArg{name, type, std::move(shape), role};
}

}  // namespace twist::reference::testing
