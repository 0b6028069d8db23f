#pragma once
// The algorithm oracle: evaluates a func graph on the CPU directly from its definitions, point by point,
// with no schedule. A reduction folds its monoid over its domain in the order the algorithm states (the
// sequential fold that every schedule must agree with).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backends/reference/host_tensor.h"
#include "lang/evaluate.h"
#include "lang/graph.h"

namespace twist::reference {

// What a program runs on: its input tensors and its scalar parameters, by name.
struct Arguments {
  std::map<std::string, HostTensor> inputs;
  std::map<std::string, double> scalars;
};

// Checks that every input the graph reads is given with its declared element type and rank, and binds
// every i32 parameter (SizeParams, and Param<int32_t>s given in `scalars`): from `scalars` first, then from
// the extents of the input tensors. A mismatch names both sides, e.g. "input 'B' dimension 0 has extent 64,
// but K is 61 (from input 'A' dimension 1)". Returns the value of each bound parameter.
std::map<std::string, int64_t> bind_sizes(const FuncGraph &graph, const Arguments &args);

// Evaluates every output value of `output` over its shape (Func::set_shape; an error if it is not set).
// In exact and extended arithmetic the tensors are f64; in typed arithmetic they have the func's output
// types.
//
// A pure func is its expression. A reduction folds its monoid from the identity over the points of its
// RDom with dimension 0 innermost (r.x varies fastest, as in Halide), skipping points where a predicate is
// false: state = combine(state, lift(elements)), and then finalize. In typed arithmetic every state
// component is rounded to its declared type after each combine. Producers are evaluated on demand and
// remembered per (func, value, point). Reading an input out of its bounds is an error naming the input,
// the index and the shape.
std::vector<HostTensor> evaluate(const Func &output, const Arguments &args, Arithmetic arithmetic);

}  // namespace twist::reference
