#pragma once
// Input: a tensor the program reads, with an element type, a rank and a shape.
#include <memory>
#include <string>
#include <vector>

#include "lang/expr.h"

namespace twist {

struct InputContents {
  std::string name;
  Type type;
  std::vector<Expr> shape;  // i32 expressions of constants and SizeParams, dimension 0 first
  Halide::Internal::Parameter parameter;
};

class Input {
 public:
  // Input A("A", f16, {M, K}): dimension 0 has extent M, dimension 1 extent K. Index 0 is the outermost
  // (slowest-varying) dimension: tensors are row-major, as in PyTorch.
  Input(const std::string &name, const Type &type, std::vector<Expr> shape);
  explicit Input(std::shared_ptr<InputContents> contents) : contents_(std::move(contents)) {}

  template <typename... Args>
  Expr operator()(const Args &...indices) const {
    return call({Expr(indices)...});
  }
  Expr call(const std::vector<Expr> &indices) const;

  const std::string &name() const { return contents_->name; }
  const Type &type() const { return contents_->type; }
  int rank() const { return static_cast<int>(contents_->shape.size()); }
  const std::vector<Expr> &shape() const { return contents_->shape; }
  const std::shared_ptr<InputContents> &contents() const { return contents_; }

 private:
  std::shared_ptr<InputContents> contents_;
};

}  // namespace twist
