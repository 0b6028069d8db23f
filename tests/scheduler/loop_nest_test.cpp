// The printed form of a kernel's launch description: tensor maps and the cluster shape appear in dumps.
#include <doctest/doctest.h>

#include "scheduler/loop_nest.h"

using namespace Halide;

TEST_CASE("to_string(Kernel) prints each tensor map and a cluster shape other than 1x1x1") {
  twist::Kernel k;
  k.name = "k";
  k.grid = {Expr(4), Expr(1), Expr(1)};
  k.threads = 128;
  const Expr m = Internal::Variable::make(Int(32), "M");
  k.buffers.push_back({"A", twist::f16, {m, Expr(64)}, twist::BufferArg::Role::input});
  k.tensor_maps.push_back({"A_map", "A", {m, Expr(64)}, {64, 64}, twist::TensorMap::Swizzle::b128});
  k.body = Internal::Evaluate::make(0);
  std::string s = twist::to_string(k);
  CHECK(s.find("tensor_map A_map: A[M, 64] box=[64, 64] swizzle=128B") != std::string::npos);
  CHECK(s.find("cluster") == std::string::npos);
  k.cluster = {2, 1, 1};
  s = twist::to_string(k);
  CHECK(s.find("cluster=(2, 1, 1)") != std::string::npos);
}
