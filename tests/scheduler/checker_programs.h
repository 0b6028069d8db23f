#pragma once
// Programs over what the checker's work added to the language, run against the oracle by the interpreter
// tests (tests/scheduler) and the GPU tests (tests/apps): integer reductions by bitwise operators and max
// over elements shifted by run-time amounts, and a softmax at a Param temperature.
#include <climits>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "algebra/builtins.h"
#include "algebra/twist.h"
#include "backends/reference/host_tensor.h"
#include "lang/twist.h"
#include "scheduler/schedule.h"

namespace twist::testing {

struct IntegerReduction {
  Monoid monoid;
  std::function<int32_t(int32_t, int32_t)> op;  // the same combine in plain C++
  int32_t identity;
};

// Users' monoids (not the library's), so that the checker, not the construction, approves their trees; each
// declared commutative, a claim the trees check.
inline std::vector<IntegerReduction> integer_reductions() {
  auto user = [](const std::string &name, int identity, std::function<Expr(const Expr &, const Expr &)> op) {
    return MonoidBuilder(name)
        .state({{"v", i32}})
        .identity({Expr(identity)})
        .combine([=](const State &a, const State &b) { return std::vector<Expr>{op(a[0], b[0])}; })
        .commutative()
        .build();
  };
  return {
      {user("bit_or", 0, [](const Expr &a, const Expr &b) { return a | b; }),
       [](int32_t a, int32_t b) { return a | b; }, 0},
      {user("bit_and", -1, [](const Expr &a, const Expr &b) { return a & b; }),
       [](int32_t a, int32_t b) { return a & b; }, -1},
      {user("bit_xor", 0, [](const Expr &a, const Expr &b) { return a ^ b; }),
       [](int32_t a, int32_t b) { return a ^ b; }, 0},
      {user("int_max", INT_MIN, [](const Expr &a, const Expr &b) { return max(a, b); }),
       [](int32_t a, int32_t b) { return a > b ? a : b; }, INT_MIN},
  };
}

// Halide's shifts, written out: a negative amount shifts the other way; 32 or more shifts every bit out.
inline int32_t halide_shift(int32_t x, int32_t amount, bool left) {
  if (amount < 0) return halide_shift(x, -amount, !left);
  if (amount >= 32) return left || x >= 0 ? 0 : -1;
  return left ? static_cast<int32_t>(static_cast<uint32_t>(x) << amount) : x >> amount;
}

// The element the integer reductions fold: x shifted left by an amount in [-20, 43] that x itself picks (so
// that negative amounts and amounts past the width reach the kernels), xor x shifted right by 3.
inline Expr shifted_element(const Expr &x) {
  return (x << ((x & 63) - 20)) ^ (x >> 3);
}
inline int32_t shifted_element(int32_t x) {
  return halide_shift(x, (x & 63) - 20, true) ^ (x >> 3);
}

// The integer reductions' schedules: by default, a tree over 32 threads, and the tree split in 4 parts.
inline std::vector<Schedule> integer_schedules(const Func &f, const std::string &rvar) {
  Schedule tree, split;
  tree[f].split(rvar, "ro", "rt", 32).bind("rt", Binding::thread);
  split[f].split(rvar, "ro", "rt", 32).bind("rt", Binding::thread).split_reduction("ro", 4);
  return {Schedule(), tree, split};
}

// i32 values spread over every bit: small ones, negative ones, and whole 32-bit patterns.
inline reference::HostTensor random_words(std::vector<int64_t> shape, uint64_t seed) {
  reference::HostTensor t(i32, std::move(shape));
  std::mt19937_64 rng(seed);
  for (int64_t e = 0; e < t.size(); ++e) {
    const auto bits = static_cast<int32_t>(rng());
    t.set_linear(e, e % 3 == 0 ? bits % 17 : bits);
  }
  return t;
}

// The softmax denominator sum_j exp((x_j - max x) / T), as (m, l) twisted over (max, +), for T in
// [0.125, 8] (`temperature` is a Param named "temperature").
inline Monoid tempered_softmax(const Expr &temperature) {
  auto scaled_exp = [=](const Expr &d) { return exp(d / temperature); };
  return algebra::TwistBuilder("tempered_softmax",
                               algebra::product({algebra::max(f32), algebra::sum(f32)}, {"m", "l"}))
      .state({{"m", f32}, {"l", f32}})
      .elements({{"s", f32}})
      .identity({-INFINITY, 0.0})
      .lift([](const State &x) {
        return std::vector<Expr>{x[0], select(x[0] == -INFINITY, 0.0f, 1.0f)};
      })
      .finalize({{"l", f32}}, [](const State &s) { return std::vector<Expr>{s["l"]}; })
      .reference(f32, [](const State &a, const State &b) { return max(a["m"], b["m"]); })
      .to_base([=](const State &s, const Expr &r) {
        return std::vector<Expr>{s["m"], select(s["m"] == -INFINITY, 0.0f, s["l"] * scaled_exp(s["m"] - r))};
      })
      .from_base([=](const State &s, const Expr &r) {
        return std::vector<Expr>{s["m"], select(s["m"] == -INFINITY, 0.0f, s["l"] * scaled_exp(r - s["m"]))};
      })
      .domain("temperature", Domain{.lo = 0.125, .hi = 8})
      .build();
}

// The normalizer of a softmax at a Param temperature over each row of x (`prefix` + "x", rows by
// `prefix` + "rows" and `prefix` + "cols"), and a schedule that folds each row by a tree of 32 threads.
struct TemperedSoftmaxProgram {
  Param<float> temperature;
  Input x;  // held here: a program refers to its inputs only while they live
  Func f;
  Schedule tree;
};

inline TemperedSoftmaxProgram tempered_softmax_program(const std::string &prefix) {
  const Param<float> temperature("temperature");
  SizeParam rows(prefix + "rows"), cols(prefix + "cols");
  Input x(prefix + "x", f32, {rows, cols});
  Var i("i");
  RDom r({{0, cols}}, prefix + "r");
  Func f(prefix + "f");
  f(i) = reduce(tempered_softmax(temperature), r, x(i, r.x));
  f.set_shape({rows});
  Schedule tree;
  tree[f].split(prefix + "r.x", "ro", "rt", 32).bind("rt", Binding::thread);
  return {temperature, x, f, tree};
}

}  // namespace twist::testing
