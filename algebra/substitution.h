#pragma once
// Simultaneous substitution of variables by expressions: how derived combines, twists, products and
// relative forms are written in terms of the expressions they are made of.
#include <map>
#include <string>
#include <vector>

#include "lang/monoid.h"

namespace twist::algebra {

class Substitution {
 public:
  // Every variable of `vars` becomes the value at the same position.
  Substitution &bind(const State &vars, const std::vector<Expr> &values);
  Substitution &bind(const std::string &name, const Expr &value);

  Expr operator()(const Expr &e) const;
  std::vector<Expr> operator()(const std::vector<Expr> &es) const;

 private:
  std::map<std::string, Halide::Expr> replacements_;
};

// The variable `name` of type t (the reference "ref", a state component "s.m", ...).
Expr variable(const Type &t, const std::string &name);

// Whether e mentions the variable `name`.
bool uses_variable(const Expr &e, const std::string &name);

// Halide's simplifier, with two rewrites it lacks: a math function of constants whose value its type holds
// exactly is that value (exp2(0) = 1, log(1) = 0; inexact results are left to the target's functions), and a
// product of two selects on one condition is one select (select(c, a, b) * select(c, x, y) =
// select(c, a * x, b * y)), so that a factor that is 1 wherever it is not 0 disappears. Let-bound names are
// made unique first, as Halide's simplifier needs.
Halide::Expr simplified(const Halide::Expr &e);
// simplified() applied to each expression, keeping twist::Expr's typing.
std::vector<Expr> simplified(const std::vector<Expr> &es);

}  // namespace twist::algebra
