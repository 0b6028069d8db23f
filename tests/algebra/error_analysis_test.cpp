// Error analysis of summation orders against an extended-precision reference.
#include <doctest/doctest.h>

#include "algebra/builtins.h"
#include "algebra/error_analysis.h"
#include "algebra/online.h"
#include "lang/error.h"

using namespace twist;
using namespace twist::algebra;

TEST_SUITE_BEGIN("algebra");

namespace {

// Positive terms, so that the relative error of the sum is not dominated by cancellation.
std::vector<Values> positive(Rng &rng, int length) {
  std::vector<Values> x;
  for (int i = 0; i < length; ++i) x.push_back({std::uniform_real_distribution<double>(0.5, 1.0)(rng)});
  return x;
}

}  // namespace

TEST_CASE("a tree sums f16 far more accurately than a sequential fold and f32 more than f16") {
  ErrorExperiment e;
  e.length = 4096;
  e.trials = 12;
  e.elements = positive;
  const ErrorStatistics sequential = forward_error(sum(f16), FoldOrder::sequential(), e);
  const ErrorStatistics tree = forward_error(sum(f16), FoldOrder::tree(), e);
  const ErrorStatistics tiled = forward_error(sum(f16), FoldOrder::tiled(64), e);
  const ErrorStatistics f32_sequential = forward_error(sum(f32), FoldOrder::sequential(), e);
  INFO("sequential ", sequential.mean, " +- ", sequential.standard_error, ", tiled(64) ", tiled.mean,
       ", tree ", tree.mean, ", f32 ", f32_sequential.mean);
  CHECK(sequential.trials == 12);
  // The sequential f16 fold's error grows like n u; tiling and trees like (n / tile + tile) u and log n u.
  CHECK(sequential.mean > tree.mean + 3 * (sequential.standard_error + tree.standard_error));
  CHECK(sequential.mean > tiled.mean + 3 * (sequential.standard_error + tiled.standard_error));
  CHECK(f32_sequential.mean * 100 < sequential.mean);
  CHECK(tree.mean > 0);
}

TEST_CASE("the error of an evaluation in double or extended arithmetic is at its rounding level") {
  ErrorExperiment e;
  e.length = 500;
  e.trials = 4;
  e.arithmetic = Arithmetic::exact;
  for (const Monoid &m : {softmax(f32), welford(f32), attention(f32, 2)}) {
    CAPTURE(m.name);
    const ErrorStatistics in_double = forward_error(m, FoldOrder::split(7), e);
    CHECK(in_double.mean < 1e-13);
    ErrorExperiment extended = e;
    extended.arithmetic = Arithmetic::extended;
    CHECK(forward_error(m, FoldOrder::tree(), extended).mean < 1e-16);
  }
}

TEST_CASE("softmax and attention in f16 stay accurate in every order since the rescales are at most 1") {
  ErrorExperiment e;
  e.length = 1024;
  e.trials = 6;
  for (const FoldOrder &order :
       {FoldOrder::sequential(), FoldOrder::tiled(32), FoldOrder::tree(), FoldOrder::split(4)}) {
    CAPTURE(order.name());
    const ErrorStatistics s = forward_error(attention(f16, 2), order, e);
    // f16's unit roundoff is 2^-11 ~ 4.9e-4; an average of 1024 values stays within a few hundred of them.
    CHECK(s.mean < 0.05);
    CHECK(s.mean > 0);
  }
}

TEST_CASE("the error of a sum of positive terms is within n u and malformed experiments are refused") {
  ErrorExperiment e;
  e.length = 256;
  e.trials = 3;
  e.elements = positive;
  const ErrorStatistics s = forward_error(sum(f32), FoldOrder::sequential(), e);
  CHECK(s.mean > 0);
  CHECK(s.mean < 256 * 6e-8);  // n u bounds the relative error of a sum of positive terms
  e.trials = 0;
  CHECK_THROWS_AS(forward_error(sum(f32), FoldOrder::sequential(), e), twist::Error);
  e.trials = 1;
  CHECK_THROWS_AS(forward_error(sum(f32), FoldOrder::tiled(0), e), twist::Error);
}

TEST_SUITE_END();
