// Reductions by integer monoids written with the bitwise operators and integer max: lowered, run on the
// interpreter and compared exactly with the oracle (integers leave no room for rounding), and their kernels
// compiled with NVRTC for sm_80 and sm_90a.
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <functional>
#include <random>

#include "backends/reference/evaluate_funcs.h"
#include "backends/reference/interpreter/interpreter.h"
#include "lang/twist.h"
#include "scheduler/arguments.h"
#include "scheduler/lower.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using twist::testing::compile_for_both_targets;
using twist::testing::Tensors;

namespace {

using Op = std::function<Expr(const Expr &, const Expr &)>;

struct Case {
  Monoid monoid;
  std::function<int32_t(int32_t, int32_t)> op;  // the same combine in plain C++
  int32_t identity;
};

// A user's monoid (not the library's), so that the checker, not the construction, approves its trees.
Monoid integer_monoid(const std::string &name, int identity, const Op &op) {
  return MonoidBuilder(name)
      .state({{"v", i32}})
      .identity({Expr(identity)})
      .combine([=](const State &a, const State &b) { return std::vector<Expr>{op(a[0], b[0])}; })
      .commutative()
      .build();
}

// i32 values spread over every bit: small ones, negative ones, and whole 32-bit patterns.
reference::HostTensor random_words(std::vector<int64_t> shape, uint64_t seed) {
  reference::HostTensor t(i32, std::move(shape));
  std::mt19937_64 rng(seed);
  for (int64_t e = 0; e < t.size(); ++e) {
    const auto bits = static_cast<int32_t>(rng());
    t.set_linear(e, e % 3 == 0 ? bits % 17 : bits);
  }
  return t;
}

}  // namespace

TEST_CASE(
    "bitwise or, and, xor and integer max reductions match the oracle exactly and compile for both targets") {
  const std::vector<Case> cases = {
      {integer_monoid("bit_or", 0, [](const Expr &a, const Expr &b) { return a | b; }),
       [](int32_t a, int32_t b) { return a | b; }, 0},
      {integer_monoid("bit_and", -1, [](const Expr &a, const Expr &b) { return a & b; }),
       [](int32_t a, int32_t b) { return a & b; }, -1},
      {integer_monoid("bit_xor", 0, [](const Expr &a, const Expr &b) { return a ^ b; }),
       [](int32_t a, int32_t b) { return a ^ b; }, 0},
      {integer_monoid("int_max", INT_MIN, [](const Expr &a, const Expr &b) { return max(a, b); }),
       [](int32_t a, int32_t b) { return std::max(a, b); }, INT_MIN},
  };
  SizeParam rows("ir_rows"), cols("ir_cols");
  Input x("ir_x", i32, {rows, cols});
  Var i("i");
  RDom r({{0, cols}}, "ir_r");
  for (const auto &[monoid, op, identity] : cases) {
    // The element is shifted and masked on the way in, so that the shifts reach the kernels too.
    Func f("ir_f");
    f(i) = reduce(monoid, r, (x(i, r.x) << 1) ^ (x(i, r.x) >> 3));
    f.set_shape({rows});
    Schedule tree, split;
    tree[f].split("ir_r.x", "ro", "rt", 32).bind("rt", Binding::thread);
    split[f].split("ir_r.x", "ro", "rt", 32).bind("rt", Binding::thread).split_reduction("ro", 4);
    for (const Schedule &schedule : {Schedule(), tree, split}) {
      const LoweredProgram program = lower(f, schedule, Target::sm90a());
      compile_for_both_targets(program);
      for (const int n : {1, 45, 333}) {
        INFO(monoid.name, " over rows of ", n);
        const std::map<std::string, double> sizes = {{"ir_rows", 3}, {"ir_cols", n}};
        const Tensors inputs = {{"ir_x", random_words({3, n}, 7 + n)}};
        const auto got =
            reference::run_program(program, inputs, bind_arguments(program, {{"ir_x", {3, n}}}, sizes));
        const auto want = reference::evaluate(f, {inputs, sizes}, Arithmetic::exact);
        const reference::HostTensor &g = got.at(program.outputs[0].name);
        const reference::HostTensor &in = inputs.at("ir_x");
        for (int64_t row = 0; row < 3; ++row) {
          int32_t folded = identity;  // the same reduction in C++, beside the oracle
          for (int64_t c = 0; c < n; ++c) {
            const auto v = static_cast<int32_t>(in.get_linear(row * n + c));
            folded = op(folded, static_cast<int32_t>(static_cast<uint32_t>(v) << 1) ^ (v >> 3));
          }
          CHECK(want[0].get_linear(row) == folded);
          CHECK(g.get_linear(row) == folded);
        }
      }
    }
  }
}
