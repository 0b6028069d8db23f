#pragma once
// Rewrites an algorithm's expression (over a func's variables, calls to inputs and funcs, and parameters)
// into kernel terms: variables become loop expressions, pure funcs are inlined, and calls to inputs become
// loads, from shared memory where the input is staged and otherwise from global memory at clamped indices
// (a point outside the tensor is only ever computed in a tail that is not stored, and must not fault).
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lang/graph.h"

namespace twist {

// The value `e` folds to when simplified, if it folds to an integer constant. (By value: as_const_int points
// into the node of the Expr it is given, which simplify()'s result, a temporary, does not keep alive.)
std::optional<int64_t> constant_value(const Halide::Expr &e);

// Row-major flat index of `coords` in a tensor of extents `shape`.
Halide::Expr flat_index(const std::vector<Halide::Expr> &coords, const std::vector<Halide::Expr> &shape);

// A global load of buffer `name` at a flat element index.
Halide::Expr load(const Type &t, const std::string &name, const Halide::Expr &index);

// `coords` clamped into a tensor of extents `shape`: a point outside the tensor is only ever computed in a
// tail that is not stored, and must not fault.
std::vector<Halide::Expr> clamped_coords(const std::vector<Halide::Expr> &coords,
                                         const std::vector<Halide::Expr> &shape);
// The global load of `input` at `coords`, clamped into its extents: how inputs are read unless a reader says
// otherwise.
Halide::Expr clamped_input_load(const Input &input, const std::vector<Halide::Expr> &coords);

struct BufferArg;

class ExprLowering {
 public:
  using Reader = std::function<Halide::Expr(const std::vector<Halide::Expr> &coords)>;
  using FuncCallHook = std::function<std::optional<Halide::Expr>(const Halide::Internal::Call *call,
                                                                 const std::vector<Halide::Expr> &args)>;

  explicit ExprLowering(const FuncGraph &graph) : graph_(graph) {}

  // The value of one of the algorithm's variables (a pure Var or an RVar) in kernel terms.
  void bind(const std::string &var, const Halide::Expr &value) { values_[var] = value; }
  void bind(const std::map<std::string, Halide::Expr> &values);
  // Reads of `input` go through `reader` (given the lowered coordinates) instead of global memory.
  void read_input_with(const std::string &input, Reader reader) { readers_[input] = std::move(reader); }
  // Calls of `func` (a func computed by an earlier stage, into a buffer) go through `reader` instead of being
  // inlined or handed to the hook.
  void read_func_with(const std::string &func, Reader reader) { func_readers_[func] = std::move(reader); }
  // Calls to reduction funcs are resolved by this hook (pure funcs are inlined); a call it declines is an
  // error.
  void on_func_call(FuncCallHook hook) { func_hook_ = std::move(hook); }

  Halide::Expr lower(const Halide::Expr &e) const;

 private:
  const FuncGraph &graph_;
  std::map<std::string, Halide::Expr> values_;
  std::map<std::string, Reader> readers_;
  std::map<std::string, Reader> func_readers_;
  FuncCallHook func_hook_;
  friend class LoweringMutator;
};

// Calls of the funcs that earlier stages computed into `intermediates` (buffers named as their funcs) read
// those buffers, at clamped coordinates as inputs are read.
void read_intermediates(ExprLowering &lowering, const std::vector<BufferArg> &intermediates);

}  // namespace twist
