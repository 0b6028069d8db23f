#pragma once
// The graph of funcs a program's outputs depend on, found by walking the calls in their definitions.
#include <string>
#include <vector>

#include "lang/func.h"
#include "lang/input.h"
#include "lang/param.h"

namespace twist {

struct ParamInfo {
  std::string name;
  Type type;
};

struct FuncGraph {
  std::vector<Func> funcs;  // every func reached, producers before their consumers; the outputs last
  std::vector<Func> outputs;
  std::vector<Input> inputs;      // in order of first use
  std::vector<ParamInfo> params;  // scalar parameters (size params included), in order of first use
  const Func &func(const std::string &name) const;  // throws if absent
  bool has_func(const std::string &name) const;
};

// Walks everything `outputs` depend on, resolving each call by the identity it carries (lang/registry.h).
// Throws if a func is undefined, a call's func or input is gone, or two different funcs or inputs of the
// program have one name.
FuncGraph walk(const std::vector<Func> &outputs);

// Calls made directly by a definition (to funcs and to inputs), in order of first appearance.
std::vector<std::string> callees(const Definition &d);
// Every expression of a definition: its values, or its reduction's elements and predicates.
std::vector<Expr> expressions(const Definition &d);

// The printed form of a func's definition, e.g. "C(i, j) = reduce(sum<f32>, r in [0, K), ...)".
std::string to_string(const Func &f);
std::string to_string(const FuncGraph &g);

}  // namespace twist
