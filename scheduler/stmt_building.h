#pragma once
// The small constructors of loop-nest statements that every kernel builder of the scheduler uses.
#include <string>
#include <utility>
#include <vector>

#include <Halide.h>

namespace twist::stmt {

using Halide::Internal::Stmt;

// An i32 variable (a loop, a lane or block index, a let).
inline Halide::Expr var(const std::string &name) {
  return Halide::Internal::Variable::make(Halide::Int(32), name);
}

// The defined statements of `stmts` in order; a no-op when there are none.
inline Stmt block(const std::vector<Stmt> &stmts) {
  std::vector<Stmt> defined;
  for (const Stmt &s : stmts)
    if (s.defined()) defined.push_back(s);
  return defined.empty() ? Halide::Internal::Evaluate::make(0) : Halide::Internal::Block::make(defined);
}

inline Stmt store(const std::string &buffer, const Halide::Expr &value, const Halide::Expr &index) {
  return Halide::Internal::Store::make(buffer, value, index, Halide::Internal::Parameter(),
                                       Halide::Internal::const_true(), Halide::Internal::ModulusRemainder());
}

// `s` where `condition` holds (no test when it always does).
inline Stmt guarded(const Halide::Expr &condition, const Stmt &s) {
  if (Halide::Internal::is_const_one(condition)) return s;
  return Halide::Internal::IfThenElse::make(condition, s);
}

inline Stmt unrolled(const std::string &name, int extent, const Stmt &body) {
  return Halide::Internal::For::make(name, 0, extent, Halide::Internal::ForType::Unrolled,
                                     Halide::DeviceAPI::None, body);
}

inline Stmt let_all(const std::vector<std::pair<std::string, Halide::Expr>> &lets, Stmt body) {
  for (auto it = lets.rbegin(); it != lets.rend(); ++it)
    body = Halide::Internal::LetStmt::make(it->first, it->second, body);
  return body;
}

// The conjunction of `conditions`, simplified.
inline Halide::Expr all_of(const std::vector<Halide::Expr> &conditions) {
  Halide::Expr c = Halide::Internal::const_true();
  for (const Halide::Expr &e : conditions) c = c && e;
  return Halide::Internal::simplify(c);
}

}  // namespace twist::stmt
