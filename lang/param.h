#pragma once
// Scalar run-time parameters: Param<T> (a softmax scale, an epsilon) and SizeParam (a named extent).
#include <cstdint>
#include <string>

#include "lang/expr.h"

namespace twist {

// A scalar known only when the program runs. Its Variable node carries a Halide Parameter, which is how
// graph walks recognise it.
class ScalarParam : public Expr {
 public:
  ScalarParam(const std::string &name, const Type &type);
  const std::string &name() const;
};

template <typename T>
constexpr Type param_type() {
  if constexpr (std::is_same_v<T, float>)
    return f32;
  else if constexpr (std::is_same_v<T, double>)
    return f64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return i32;
  else
    static_assert(sizeof(T) == 0, "Param<T> supports float, double and int32_t");
}

template <typename T>
class Param : public ScalarParam {
 public:
  explicit Param(const std::string &name) : ScalarParam(name, param_type<T>()) {}
};

// A named extent, e.g. the K of a GEMM, bound from the shapes of the tensors a program runs on.
class SizeParam : public ScalarParam {
 public:
  explicit SizeParam(const std::string &name) : ScalarParam(name, i32) {}
};

// Whether a Variable node is a run-time parameter.
bool is_param(const Halide::Internal::Variable *v);

}  // namespace twist
