#pragma once
// Loop variables: Var (a pure dimension of a func) and RVar / RDom (a reduction domain).
#include <memory>
#include <string>
#include <vector>

#include "lang/expr.h"

namespace twist {

// A pure variable: one dimension of a func's definition, e.g. i and j in C(i, j) = ...
class Var : public Expr {
 public:
  Var();  // a fresh name
  explicit Var(const std::string &name);
  const std::string &name() const;
};

struct RDomContents;

// One variable of a reduction domain, ranging over [min, min + extent).
class RVar : public Expr {
 public:
  RVar() = default;  // an absent dimension (RDom::y of a one-dimensional domain): undefined
  RVar(std::shared_ptr<const RDomContents> domain, int index);
  const std::string &name() const;
  Expr min() const;
  Expr extent() const;
  // The domain this variable belongs to.
  const RDomContents &domain() const { return *domain_; }

 private:
  std::shared_ptr<const RDomContents> domain_;
  int index_ = 0;
};

struct RDomContents {
  std::string name;
  struct Dimension {
    std::string var_name;
    Expr min, extent;
  };
  std::vector<Dimension> dims;  // outermost first is dims.back(): dims[0] varies fastest, as in Halide
  Halide::Internal::ReductionDomain marker;  // attached to each RVar's Variable node, to recognise it in IR
};

// A reduction domain of one or more RVars with bounds, plus predicates that restrict it (for example a
// causal mask j <= i). Predicates may refer to the pure variables of the func that reduces over it.
class RDom {
 public:
  // RDom r({{0, K}}) or RDom r({{0, M}, {0, N}}, "r"); each pair is (min, extent).
  RDom(const std::vector<std::pair<Expr, Expr>> &ranges, const std::string &name = "");
  RDom(Expr min, Expr extent, const std::string &name = "") : RDom({{min, extent}}, name) {}

  int dimensions() const { return static_cast<int>(contents_->dims.size()); }
  RVar operator[](int i) const;
  const std::string &name() const { return contents_->name; }

  // A copy of this domain (same variables) restricted to the points where `predicate` holds.
  RDom where(const Expr &predicate) const;
  const std::vector<Expr> &predicates() const { return predicates_; }

  const std::shared_ptr<const RDomContents> &contents() const { return contents_; }
  bool same_domain(const RDom &other) const { return contents_ == other.contents_; }

  // The first four variables by name, as in Halide (undefined where the domain has fewer dimensions).
  RVar x, y, z, w;

 private:
  std::shared_ptr<const RDomContents> contents_;
  std::vector<Expr> predicates_;
};

// Whether a Variable node is an RVar (and of which domain, by its marker).
bool is_rvar(const Halide::Internal::Variable *v);

// Fresh names for unnamed objects: "<prefix><n>".
std::string fresh_name(const std::string &prefix);

}  // namespace twist
