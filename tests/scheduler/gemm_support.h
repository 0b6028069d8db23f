#pragma once
// What the GEMM lowering tests share: a problem's sizes as the scalars of apps::Gemm.
#include <map>
#include <string>

#include "apps/gemm/gemm.h"

namespace twist::testing {

struct GemmShape {
  int m, n, k;
};

// The size parameters of `g` (M, N, K) at m x n x k.
inline std::map<std::string, double> gemm_sizes(const apps::Gemm &g, int m, int n, int k) {
  return {{g.M.name(), m}, {g.N.name(), n}, {g.K.name(), k}};
}

}  // namespace twist::testing
