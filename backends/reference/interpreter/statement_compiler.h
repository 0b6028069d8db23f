#pragma once
// Compiles a kernel body (a Halide statement in the loop-nest IR) into closures once, so that running a
// block is only closure calls. Each closure executes its statement for all active threads of the block
// together, as a GPU does: a statement's loads are made by every thread before any of its stores.
#include <map>
#include <string>
#include <vector>

#include "backends/reference/interpreter/machine.h"

namespace twist::reference::interpreter {

class StatementCompiler {
 public:
  explicit StatementCompiler(Machine &machine);
  ~StatementCompiler();
  StatementCompiler(const StatementCompiler &) = delete;
  StatementCompiler &operator=(const StatementCompiler &) = delete;

  // A kernel buffer, visible everywhere in the body; Allocate nodes of the same name shadow it.
  void add_buffer(Array &array);
  // A variable that has a value before the body starts (threadIdx.x, blockIdx.*, the scalar arguments).
  void add_variable(const std::string &name);

  Exec compile(const Stmt &s);

  // For the intrinsics' compilers.
  Machine &machine() { return machine_; }
  CompiledExpr expr(const Halide::Expr &e);
  // The buffer a statement names: the innermost enclosing Allocate, or the kernel buffer. `use` says what
  // the statement does with it, for the message if there is none.
  Array &buffer(const std::string &name, const char *use);
  // The same, for a statement that writes the buffer: a kernel's input buffers are read-only.
  Array &writable_buffer(const std::string &name, const char *use);
  // The bytes of every shared allocation compiled so far.

 private:
  Exec block(const Stmt &s);
  Exec let_stmt(const Halide::Internal::LetStmt *op);
  Exec for_loop(const Halide::Internal::For *op);
  Exec if_then_else(const Halide::Internal::IfThenElse *op);
  Exec allocate(const Halide::Internal::Allocate *op);
  Exec store(const Halide::Internal::Store *op);
  Exec evaluate(const Stmt &s);
  Exec assert_stmt(const Halide::Internal::AssertStmt *op);

  // Binds a variable for `body`: a name that an enclosing binding already uses is renamed in `body`, so
  // that every binding in scope has its own slot. Returns the name it is bound under.
  std::string bind(const std::string &name, const Type &type, Stmt &body);
  void unbind(const std::string &name);

  Machine &machine_;
  std::map<std::string, std::vector<Array *>> buffers_;  // by name, innermost last
  std::map<std::string, int> bound_;                     // variable names bound around the statement
  int renames_ = 0;
  size_t shared_arrays_compiled_ = 0;  // allocations compile in the order shared_arrays lists them
};

}  // namespace twist::reference::interpreter
