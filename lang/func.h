#pragma once
// Func: a named function over pure variables, defined either pointwise (f(i, j) = expr) or as a
// reduction over a monoid (f(i) = reduce(monoid, r, elements...)).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lang/expr.h"
#include "lang/monoid.h"
#include "lang/var.h"

namespace twist {

// The right-hand side of a reduction definition: fold `monoid` over the points of `domain` (where its
// predicates hold), lifting `elements` at each point. The func's values are the monoid's finalize.
struct Reduction {
  std::shared_ptr<const Monoid> monoid;
  RDom domain;
  std::vector<Expr> elements;
};

Reduction reduce(const Monoid &monoid, const RDom &domain, std::vector<Expr> elements);
inline Reduction reduce(const Monoid &monoid, const RDom &domain, const Expr &element) {
  return reduce(monoid, domain, std::vector<Expr>{element});
}

struct Definition {
  std::vector<Var> args;               // the pure variables, dimension 0 (outermost) first
  std::vector<Expr> values;            // a pure definition: one expression per output
  std::optional<Reduction> reduction;  // a reduction definition
  bool is_reduction() const { return reduction.has_value(); }
};

struct FuncContents {
  std::string name;
  std::optional<Definition> definition;
  std::vector<Type> output_types;
  std::vector<Expr> shape;  // the extents it is computed over when it is an output (see Func::set_shape)
  // Carried by every call of the func (as the Call's param), so that a call finds its func even when another
  // func of another program has the same name.
  Halide::Internal::Parameter identity;
};

class FuncRef;

class Func {
 public:
  explicit Func(const std::string &name = "");
  explicit Func(std::shared_ptr<FuncContents> contents) : contents_(std::move(contents)) {}

  template <typename... Args>
  FuncRef operator()(const Args &...args) const;
  FuncRef operator()(const std::vector<Expr> &args) const;

  const std::string &name() const { return contents_->name; }
  bool defined() const { return contents_->definition.has_value(); }
  const Definition &definition() const;
  int dimensions() const { return static_cast<int>(definition().args.size()); }
  int outputs() const { return static_cast<int>(contents_->output_types.size()); }
  const std::vector<Type> &output_types() const { return contents_->output_types; }

  // The extents of the func's dimensions when it is computed as an output, e.g. C.set_shape({M, N}).
  Func &set_shape(std::vector<Expr> extents);
  const std::vector<Expr> &shape() const { return contents_->shape; }

  const std::shared_ptr<FuncContents> &contents() const { return contents_; }
  bool same_as(const Func &other) const { return contents_ == other.contents_; }

 private:
  std::shared_ptr<FuncContents> contents_;
};

// f(args...): on the left of '=' it defines f; elsewhere it is a call (an Expr) of f's single value, and
// f(args...)[k] calls its k-th value.
class FuncRef : public Expr {
 public:
  FuncRef(std::shared_ptr<FuncContents> func, std::vector<Expr> args);

  FuncRef &operator=(const Expr &value);
  FuncRef &operator=(const FuncRef &value);
  FuncRef &operator=(const Reduction &reduction);
  FuncRef &operator=(const std::vector<Expr> &values);  // a func of several values
  template <Number N>
  FuncRef &operator=(N value) {
    return *this = (std::is_integral_v<N> ? Expr(static_cast<int>(value)) : Expr(static_cast<double>(value)));
  }

  Expr operator[](int value_index) const;

 private:
  void define(Definition definition, std::vector<Type> output_types);
  std::vector<Var> lhs_vars() const;
  std::shared_ptr<FuncContents> func_;
  std::vector<Expr> args_;
};

template <typename... Args>
FuncRef Func::operator()(const Args &...args) const {
  return (*this)(std::vector<Expr>{Expr(args)...});
}

}  // namespace twist
