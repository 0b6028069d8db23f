// The algorithm oracle against hand-written loops over the same random inputs. Exact arithmetic is double
// arithmetic in the algorithm's order, and typed f32 is float arithmetic, so most comparisons are bit for
// bit.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>

#include "backends/reference/evaluate_funcs.h"
#include "lang/float_formats.h"
#include "lang/twist.h"
#include "tests/reference/test_monoids.h"

using namespace twist;
using namespace twist::reference;
using namespace twist::testing;

namespace {

// The number of elements where got differs from want(index...), which is called with the row-major
// multi-index of each element.
template <typename Want>
int mismatches(const HostTensor &got, Want want) {
  int count = 0;
  std::vector<int64_t> index(got.rank(), 0);
  for (int64_t k = 0; k < got.size(); ++k) {
    int64_t rest = k;
    for (int d = got.rank(); d-- > 0;) {
      index[d] = rest % got.shape()[d];
      rest /= got.shape()[d];
    }
    if (got.get(index) != want(index)) ++count;
  }
  return count;
}
}  // namespace

TEST_CASE("a pointwise func with a scalar parameter") {
  SizeParam M("M"), N("N");
  Input A("pw_A", f32, {M, N}), B("pw_B", f32, {M, N});
  Param<float> scale("pw_scale");
  Var i("i"), j("j");
  Func f("pw_f");
  f(i, j) = A(i, j) * scale + B(i, j);
  f.set_shape({M, N});
  const Arguments args{{{"pw_A", random_normal(f32, {5, 7}, 1)}, {"pw_B", random_normal(f32, {5, 7}, 2)}},
                       {{"pw_scale", 0.37}}};
  const HostTensor &a = args.inputs.at("pw_A"), &b = args.inputs.at("pw_B");

  const std::vector<HostTensor> exact = evaluate(f, args, Arithmetic::exact);
  REQUIRE(exact.size() == 1);
  CHECK(exact[0].type() == f64);
  CHECK(exact[0].shape() == std::vector<int64_t>{5, 7});
  CHECK(mismatches(exact[0], [&](auto &x) { return a.get(x) * 0.37 + b.get(x); }) == 0);

  const std::vector<HostTensor> typed = evaluate(f, args, Arithmetic::typed);
  CHECK(typed[0].type() == f32);
  CHECK(mismatches(typed[0], [&](auto &x) {
          const float product = static_cast<float>(a.get(x)) * 0.37f;
          return static_cast<double>(product + static_cast<float>(b.get(x)));
        }) == 0);
}

TEST_CASE("a func calling a func") {
  SizeParam N("N");
  Input A("fc_A", f64, {N});
  Var i("i");
  Func g("fc_g"), f("fc_f");
  g(i) = A(i) * 2.0 + 1.0;
  f(i) = g(i) * g(i + 1) - g(i);
  f.set_shape({N - 1});
  const Arguments args{{{"fc_A", random_normal(f64, {33}, 3)}}, {}};
  const HostTensor &a = args.inputs.at("fc_A");
  const HostTensor out = evaluate(f, args, Arithmetic::exact)[0];
  CHECK(out.shape() == std::vector<int64_t>{32});
  CHECK(mismatches(out, [&](auto &x) {
          const double g0 = a.get({x[0]}) * 2 + 1, g1 = a.get({x[0] + 1}) * 2 + 1;
          return g0 * g1 - g0;
        }) == 0);
}

TEST_CASE("row sums: a sum over one RVar") {
  SizeParam M("M"), N("N");
  Input A("rs_A", f64, {M, N});
  Var i("i");
  RDom r(0, N, "rs_r");
  Func rows("rs_rows");
  rows(i) = reduce(sum_monoid(f64), r, A(i, r.x));
  rows.set_shape({M});
  const Arguments args{{{"rs_A", random_normal(f64, {9, 100}, 4)}}, {}};
  const HostTensor &a = args.inputs.at("rs_A");
  CHECK(mismatches(evaluate(rows, args, Arithmetic::exact)[0], [&](auto &x) {
          double s = 0;
          for (int64_t k = 0; k < 100; ++k) s += a.get({x[0], k});
          return s;
        }) == 0);
}

TEST_CASE("reductions over two RVars: a 3x3 window and the whole matrix, r.x innermost") {
  SizeParam M("M"), N("N");
  Input A("w_A", f64, {M, N});
  Var i("i"), j("j");
  RDom w({{0, 3}, {0, 3}}, "w_r");
  Func window("w_window");
  window(i, j) = reduce(sum_monoid(f64), w, A(i + w.y, j + w.x) * cast(f64, w.x + 1 + 3 * w.y));
  window.set_shape({M - 2, N - 2});
  RDom all({{0, N}, {0, M}}, "w_all");
  Func total("w_total");
  total() = reduce(sum_monoid(f64), all, A(all.y, all.x));
  total.set_shape({});

  const Arguments args{{{"w_A", random_normal(f64, {12, 10}, 5)}}, {}};
  const HostTensor &a = args.inputs.at("w_A");
  const HostTensor got = evaluate(window, args, Arithmetic::exact)[0];
  CHECK(got.shape() == std::vector<int64_t>{10, 8});
  CHECK(mismatches(got, [&](auto &x) {
          double s = 0;
          for (int64_t y = 0; y < 3; ++y)
            for (int64_t z = 0; z < 3; ++z)
              s += a.get({x[0] + y, x[1] + z}) * static_cast<double>(z + 1 + 3 * y);
          return s;
        }) == 0);

  double s = 0;
  for (int64_t y = 0; y < 12; ++y)
    for (int64_t z = 0; z < 10; ++z) s += a.get({y, z});
  const HostTensor sum = evaluate(total, args, Arithmetic::exact)[0];
  CHECK(sum.rank() == 0);
  CHECK(sum.get({}) == s);
}

TEST_CASE("max and min reductions") {
  SizeParam M("M"), N("N");
  Input A("mm_A", f32, {M, N});
  Var i("i");
  RDom r(0, N, "mm_r");
  Func largest("mm_max"), smallest("mm_min");
  largest(i) = reduce(max_monoid(f32), r, A(i, r.x));
  smallest(i) = reduce(min_monoid(f32), r, A(i, r.x));
  largest.set_shape({M});
  smallest.set_shape({M});
  const Arguments args{{{"mm_A", random_normal(f32, {6, 50}, 6)}}, {}};
  const HostTensor &a = args.inputs.at("mm_A");
  auto row_extreme = [&](int64_t row, bool want_max) {
    double m = want_max ? -INFINITY : INFINITY;
    for (int64_t k = 0; k < 50; ++k)
      m = want_max ? std::max(m, a.get({row, k})) : std::min(m, a.get({row, k}));
    return m;
  };
  for (Arithmetic arithmetic : {Arithmetic::exact, Arithmetic::typed}) {
    CHECK(mismatches(evaluate(largest, args, arithmetic)[0],
                     [&](auto &x) { return row_extreme(x[0], true); }) == 0);
    CHECK(mismatches(evaluate(smallest, args, arithmetic)[0],
                     [&](auto &x) { return row_extreme(x[0], false); }) == 0);
  }
}

TEST_CASE("GEMM with f16 inputs and an f32 sum, 128x128x128") {
  SizeParam M("M"), N("N"), K("K");
  Input A("gemm_A", f16, {M, K}), B("gemm_B", f16, {K, N});
  Var i("i"), j("j");
  RDom k(0, K, "gemm_k");
  Func C("gemm_C");
  C(i, j) = reduce(sum_monoid(f32), k, cast(f32, A(i, k.x)) * cast(f32, B(k.x, j)));
  C.set_shape({M, N});
  const int64_t n = 128;
  const Arguments args{{{"gemm_A", random_normal(f16, {n, n}, 7)}, {"gemm_B", random_normal(f16, {n, n}, 8)}},
                       {}};
  const HostTensor &a = args.inputs.at("gemm_A"), &b = args.inputs.at("gemm_B");

  const auto start = std::chrono::steady_clock::now();
  const HostTensor exact = evaluate(C, args, Arithmetic::exact)[0];
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("128x128x128 GEMM in exact arithmetic took ", seconds, " s");
  CHECK(mismatches(exact, [&](auto &x) {
          double s = 0;
          for (int64_t q = 0; q < n; ++q) s += a.get({x[0], q}) * b.get({q, x[1]});
          return s;
        }) == 0);

  const HostTensor typed = evaluate(C, args, Arithmetic::typed)[0];
  CHECK(typed.type() == f32);
  CHECK(mismatches(typed, [&](auto &x) {
          float s = 0;
          for (int64_t q = 0; q < n; ++q) {
            const float product = static_cast<float>(a.get({x[0], q})) * static_cast<float>(b.get({q, x[1]}));
            s += product;
          }
          return static_cast<double>(s);
        }) == 0);
  CHECK(relative_l2_error(typed, exact) < 1e-6);
  CHECK(relative_l2_error(typed, exact) > 0);  // float accumulation does round
}

TEST_CASE("softmax over rows: a max and a sum reduction feeding a pure func") {
  SizeParam M("M"), N("N");
  Input X("sm_X", f64, {M, N});
  Var i("i"), j("j");
  RDom r(0, N, "sm_r"), q(0, N, "sm_q");
  Func row_max("sm_max"), denominator("sm_den"), softmax("sm_softmax");
  row_max(i) = reduce(max_monoid(f64), r, X(i, r.x));
  denominator(i) = reduce(sum_monoid(f64), q, exp(X(i, q.x) - row_max(i)));
  softmax(i, j) = exp(X(i, j) - row_max(i)) / denominator(i);
  softmax.set_shape({M, N});
  const int64_t rows = 7, cols = 300;
  const Arguments args{{{"sm_X", random_normal(f64, {rows, cols}, 9, 0.0, 4.0)}}, {}};
  const HostTensor &x = args.inputs.at("sm_X");

  HostTensor want(f64, {rows, cols});
  for (int64_t row = 0; row < rows; ++row) {
    double m = -INFINITY, l = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, x.get({row, c}));
    for (int64_t c = 0; c < cols; ++c) l += std::exp(x.get({row, c}) - m);
    for (int64_t c = 0; c < cols; ++c) want.set({row, c}, std::exp(x.get({row, c}) - m) / l);
  }
  const HostTensor got = evaluate(softmax, args, Arithmetic::exact)[0];
  // exp is computed in long double here and in double by libm: the two differ by at most an ulp or so.
  CHECK(relative_l2_error(got, want) < 1e-15);
  for (int64_t row = 0; row < rows; ++row) {
    double total = 0;
    for (int64_t c = 0; c < cols; ++c) total += got.get({row, c});
    CHECK(total == doctest::Approx(1.0).epsilon(1e-13));
  }
}

TEST_CASE("a reduction with a predicate: causal (triangular) sums") {
  SizeParam N("N");
  Input A("cs_A", f64, {N}), S("cs_S", f64, {N, N});
  Var i("i"), j("j");
  RDom r(0, N, "cs_r");
  Func prefix("cs_prefix"), masked("cs_masked");
  prefix(i) = reduce(sum_monoid(f64), r.where(r.x <= i), A(r.x));
  prefix.set_shape({N});
  // Scores of later positions are masked out, as in causal attention.
  RDom q(0, N, "cs_q");
  masked(i) = reduce(max_monoid(f64), q.where(q.x <= i && q.x != 3), S(i, q.x));
  masked.set_shape({N});
  const Arguments args{{{"cs_A", random_normal(f64, {40}, 10)}, {"cs_S", random_normal(f64, {40, 40}, 11)}},
                       {}};
  const HostTensor &a = args.inputs.at("cs_A"), &s = args.inputs.at("cs_S");
  CHECK(mismatches(evaluate(prefix, args, Arithmetic::exact)[0], [&](auto &x) {
          double total = 0;
          for (int64_t k = 0; k <= x[0]; ++k) total += a.get({k});
          return total;
        }) == 0);
  CHECK(mismatches(evaluate(masked, args, Arithmetic::exact)[0], [&](auto &x) {
          double m = -INFINITY;  // row 3 keeps only positions 0..2, row 0 position 0
          for (int64_t k = 0; k <= x[0]; ++k)
            if (k != 3) m = std::max(m, s.get({x[0], k}));
          return m;
        }) == 0);
}

TEST_CASE("a batched matrix product: three pure dimensions") {
  SizeParam Bt("Bt"), M("M"), N("N"), K("K");
  Input A("bm_A", f32, {Bt, M, K}), B("bm_B", f32, {Bt, K, N});
  Var b("b"), i("i"), j("j");
  RDom k(0, K, "bm_k");
  Func C("bm_C");
  C(b, i, j) = reduce(sum_monoid(f32), k, A(b, i, k.x) * B(b, k.x, j));
  C.set_shape({Bt, M, N});
  const Arguments args{
      {{"bm_A", random_normal(f32, {3, 5, 17}, 12)}, {"bm_B", random_normal(f32, {3, 17, 4}, 13)}}, {}};
  const HostTensor &a = args.inputs.at("bm_A"), &bb = args.inputs.at("bm_B");
  const HostTensor exact = evaluate(C, args, Arithmetic::exact)[0];
  CHECK(exact.shape() == std::vector<int64_t>{3, 5, 4});
  CHECK(mismatches(exact, [&](auto &x) {
          double s = 0;
          for (int64_t q = 0; q < 17; ++q) s += a.get({x[0], x[1], q}) * bb.get({x[0], q, x[2]});
          return s;
        }) == 0);
  CHECK(mismatches(evaluate(C, args, Arithmetic::typed)[0], [&](auto &x) {
          float s = 0;
          for (int64_t q = 0; q < 17; ++q) {
            const float product =
                static_cast<float>(a.get({x[0], x[1], q})) * static_cast<float>(bb.get({x[0], q, x[2]}));
            s += product;
          }
          return static_cast<double>(s);
        }) == 0);
}

TEST_CASE("i32 funcs: Halide's division on negative values, and an integer sum") {
  SizeParam M("M"), N("N");
  Input V("int_V", i32, {M, N});
  Var i("i"), j("j");
  Func q("int_q");
  q(i, j) = V(i, j) / 3 * 10 + V(i, j) % 3;
  q.set_shape({M, N});
  RDom r(0, N, "int_r");
  Func z("int_z");
  z(i) = reduce(sum_monoid(i32), r, V(i, r.x) * V(i, r.x) - 7);
  z.set_shape({M});
  const Arguments args{{{"int_V", random_uniform(i32, {6, 20}, 14, -50, 50)}}, {}};
  const HostTensor &v = args.inputs.at("int_V");
  auto floor_div = [](int64_t value) {
    const int64_t remainder = ((value % 3) + 3) % 3;
    return (value - remainder) / 3 * 10 + remainder;
  };
  for (Arithmetic arithmetic : {Arithmetic::exact, Arithmetic::typed}) {
    const HostTensor got = evaluate(q, args, arithmetic)[0];
    CHECK(got.type() == (arithmetic == Arithmetic::typed ? i32 : f64));
    CHECK(mismatches(got, [&](auto &x) {
            return static_cast<double>(floor_div(static_cast<int64_t>(v.get(x))));
          }) == 0);
  }
  CHECK(mismatches(evaluate(z, args, Arithmetic::typed)[0], [&](auto &x) {
          int64_t s = 0;
          for (int64_t k = 0; k < 20; ++k) s += static_cast<int64_t>(v.get({x[0], k}) * v.get({x[0], k})) - 7;
          return static_cast<double>(s);
        }) == 0);
  // There are negative values for the division to be tested on.
  int negative = 0;
  for (int64_t k = 0; k < v.size(); ++k)
    negative += v.get_linear(k) < 0 && static_cast<int64_t>(v.get_linear(k)) % 3;
  CHECK(negative > 10);
}

TEST_CASE("typed arithmetic: an f16 accumulator stalls, an f32 one stays close, exact and extended do not") {
  SizeParam M("M"), N("N");
  Input X("acc_X", f16, {M, N});
  Var i("i");
  RDom r(0, N, "acc_r");
  Func half_sum("acc_f16"), float_sum("acc_f32"), double_sum("acc_f64");
  half_sum(i) = reduce(sum_monoid(f16), r, X(i, r.x));
  float_sum(i) = reduce(sum_monoid(f32), r, cast(f32, X(i, r.x)));
  double_sum(i) = reduce(sum_monoid(f64), r, cast(f64, X(i, r.x)));
  for (Func *f : {&half_sum, &float_sum, &double_sum}) f->set_shape({M});
  // Values in (0.1, 0.9), about 8192 * 0.5 = 4096 per row: past 2048 the spacing of f16 is 2, and adding
  // less than 1 rounds back.
  const int64_t rows = 3, cols = 8192;
  const Arguments args{{{"acc_X", random_uniform(f16, {rows, cols}, 15, 0.1, 0.9)}}, {}};
  const HostTensor &x = args.inputs.at("acc_X");

  const HostTensor typed = evaluate(half_sum, args, Arithmetic::typed)[0];
  const HostTensor exact = evaluate(half_sum, args, Arithmetic::exact)[0];
  CHECK(typed.type() == f16);
  for (int64_t row = 0; row < rows; ++row) {
    double f16_acc = 0, double_acc = 0;
    for (int64_t c = 0; c < cols; ++c) {
      f16_acc = from_f16_bits(f16_bits(f16_acc + x.get({row, c})));
      double_acc += x.get({row, c});
    }
    CHECK(typed.get({row}) == f16_acc);
    CHECK(typed.get({row}) == 2048.0);
    CHECK(exact.get({row}) == double_acc);
    CHECK(exact.get({row}) > 4000.0);
  }
  CHECK(relative_l2_error(typed, exact) > 0.4);

  const HostTensor float_typed = evaluate(float_sum, args, Arithmetic::typed)[0];
  CHECK(float_typed.type() == f32);
  CHECK(relative_l2_error(float_typed, exact) < 1e-5);
  CHECK(relative_l2_error(float_typed, exact) > 0);
  CHECK(mismatches(float_typed, [&](auto &index) {
          float s = 0;
          for (int64_t c = 0; c < cols; ++c) s += static_cast<float>(x.get({index[0], c}));
          return static_cast<double>(s);
        }) == 0);

  const HostTensor extended = evaluate(double_sum, args, Arithmetic::extended)[0];
  CHECK(mismatches(extended, [&](auto &index) {
          long double s = 0;
          for (int64_t c = 0; c < cols; ++c) s += x.get({index[0], c});
          return static_cast<double>(s);
        }) == 0);
}

TEST_CASE("a multi-valued reduction with finalize: the mean and the count of positive values") {
  SizeParam M("M"), N("N");
  Input X("mv_X", f64, {M, N});
  Var i("i");
  RDom r(0, N, "mv_r");
  const Monoid mean = MonoidBuilder("mean_and_positives")
                          .state({{"n", f64}, {"sum", f64}, {"positive", i32}})
                          .elements({{"x", f64}})
                          .identity({0.0, 0.0, 0})
                          .combine([](const State &a, const State &b) {
                            return std::vector<Expr>{a[0] + b[0], a[1] + b[1], a[2] + b[2]};
                          })
                          .lift([](const State &x) {
                            return std::vector<Expr>{Expr(1.0), x[0], select(x[0] > 0.0, Expr(1), Expr(0))};
                          })
                          .finalize({{"mean", f64}, {"positive", i32}},
                                    [](const State &s) {
                                      return std::vector<Expr>{s[1] / s[0], s[2]};
                                    })
                          .build();
  Func stats("mv_stats");
  stats(i) = reduce(mean, r, X(i, r.x));
  stats.set_shape({M});
  const Arguments args{{{"mv_X", random_normal(f64, {4, 31}, 16)}}, {}};
  const HostTensor &x = args.inputs.at("mv_X");
  const std::vector<HostTensor> got = evaluate(stats, args, Arithmetic::typed);
  REQUIRE(got.size() == 2);
  CHECK(got[0].type() == f64);
  CHECK(got[1].type() == i32);
  for (int64_t row = 0; row < 4; ++row) {
    double n = 0, s = 0;
    int positive = 0;
    for (int64_t c = 0; c < 31; ++c) {
      n += 1;
      s += x.get({row, c});
      positive += x.get({row, c}) > 0;
    }
    CHECK(got[0].get({row}) == s / n);
    CHECK(got[1].get({row}) == positive);
  }
}

TEST_CASE("a producer is evaluated once per point, however often it is called there") {
  // Each func calls its producer twice at the same point (once per point of a two-point reduction, and
  // twice in a pure expression), so without memoization 40 levels would take 2^40 evaluations per point.
  SizeParam N("N");
  Input A("memo_A", f64, {N});
  Var i("i");
  std::vector<Func> chain;
  chain.emplace_back("memo_0");
  chain[0](i) = A(i);
  for (int level = 1; level <= 40; ++level) {
    chain.emplace_back(fmt::format("memo_{}", level));
    const Func &producer = chain[level - 1];
    if (level % 2) {
      RDom r(0, 2, fmt::format("memo_r{}", level));
      chain[level](i) = reduce(sum_monoid(f64), r, producer(i) * 0.5);
    } else {
      chain[level](i) = producer(i) * 0.25 + producer(i) * 0.75;
    }
  }
  chain.back().set_shape({N});
  const Arguments args{{{"memo_A", random_normal(f64, {16}, 17)}}, {}};
  const auto start = std::chrono::steady_clock::now();
  const HostTensor got = evaluate(chain.back(), args, Arithmetic::exact)[0];
  MESSAGE("40 levels took ", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
          " s");
  // Halves and quarters of a double add up exactly, so every level reproduces its input.
  CHECK(mismatches(got, [&](auto &x) { return args.inputs.at("memo_A").get(x); }) == 0);
}
