// What the oracle says when the arguments do not fit the program.
#include <doctest/doctest.h>

#include "backends/reference/evaluate_funcs.h"
#include "lang/twist.h"
#include "tests/error_capture.h"
#include "tests/reference/test_monoids.h"

using twist::testing::contains;
using twist::testing::error_of;

using namespace twist;
using namespace twist::reference;
using namespace twist::testing;

namespace {

// C = A * B over K, the shape every message below talks about.
struct Gemm {
  SizeParam M{"M"}, N{"N"}, K{"K"};
  Input A{"A", f16, {M, K}}, B{"B", f16, {K, N}};
  Var i{"i"}, j{"j"};
  RDom k{0, K, "k"};
  Func C{"C"};
  Gemm() {
    C(i, j) = reduce(sum_monoid(f32), k, cast(f32, A(i, k.x)) * cast(f32, B(k.x, j)));
    C.set_shape({M, N});
  }
};

}  // namespace

TEST_CASE("sizes bind from input shapes, and a mismatch names both sides") {
  Gemm g;
  const FuncGraph graph = walk({g.C});
  Arguments args{{{"A", random_normal(f16, {8, 61}, 1)}, {"B", random_normal(f16, {61, 5}, 2)}}, {}};
  const std::map<std::string, int64_t> sizes = bind_sizes(graph, args);
  CHECK(sizes == std::map<std::string, int64_t>{{"K", 61}, {"M", 8}, {"N", 5}});

  args.inputs.at("B") = random_normal(f16, {64, 5}, 2);
  CHECK(error_of([&] { bind_sizes(graph, args); }) ==
        "input 'B' dimension 0 has extent 64, but K is 61 (from input 'A' dimension 1)");
  CHECK(error_of([&] { evaluate(g.C, args, Arithmetic::exact); }) ==
        "input 'B' dimension 0 has extent 64, but K is 61 (from input 'A' dimension 1)");

  args.inputs.at("B") = random_normal(f16, {61, 5}, 2);
  args.scalars["K"] = 60;
  CHECK(error_of([&] { bind_sizes(graph, args); }) ==
        "input 'A' dimension 1 has extent 61, but K is 60 (from scalar 'K')");
  args.scalars["K"] = 60.5;
  CHECK(error_of([&] { bind_sizes(graph, args); }) == "scalar 'K' is 60.5, but it must be an i32 integer");
}

TEST_CASE("an extent that is an expression of sizes is checked once the sizes are bound") {
  SizeParam N("N");
  Input A("de_A", f64, {N}), D("de_D", f64, {N * 2});
  Var i("i");
  Func f("de_f");
  f(i) = A(i) + D(2 * i);
  f.set_shape({N});
  Arguments args{{{"de_A", random_normal(f64, {5}, 1)}, {"de_D", random_normal(f64, {11}, 2)}}, {}};
  CHECK(error_of([&] { evaluate(f, args, Arithmetic::exact); }) ==
        "input 'de_D' dimension 0 has extent 11, but its declared extent `(N*2)` is 10");
  args.inputs.erase("de_A");
  CHECK(error_of([&] {
          evaluate(f, args, Arithmetic::exact);
        }).starts_with("missing input 'de_A' (f64[N]): the program reads it; pass it in Arguments::inputs"));
}

TEST_CASE("missing inputs and scalars, wrong element types and ranks are named") {
  Gemm g;
  Arguments args{{{"A", random_normal(f16, {8, 16}, 1)}}, {}};
  CHECK(error_of([&] { evaluate(g.C, args, Arithmetic::exact); }) ==
        "missing input 'B' (f16[K, N]): the program reads it; pass it in Arguments::inputs");
  args.inputs["B"] = random_normal(f32, {16, 4}, 2);
  CHECK(error_of([&] { evaluate(g.C, args, Arithmetic::exact); }) ==
        "input 'B' is declared f16[K, N] but was given a f32 tensor; convert it to f16 first");
  args.inputs["B"] = random_normal(f16, {16, 4, 1}, 2);
  CHECK(error_of([&] { evaluate(g.C, args, Arithmetic::exact); }) ==
        "input 'B' is declared with rank 2 ([K, N]) but was given a tensor of rank 3 (shape [16, 4, 1])");

  SizeParam N("N");
  Input X("ms_X", f32, {N});
  Param<float> scale("ms_scale");
  Var i("i");
  Func f("ms_f");
  f(i) = X(i) * scale;
  f.set_shape({N});
  const Arguments no_scale{{{"ms_X", random_normal(f32, {4}, 3)}}, {}};
  CHECK(error_of([&] { evaluate(f, no_scale, Arithmetic::exact); }) ==
        "missing scalar 'ms_scale' (f32): the program uses it; pass it in Arguments::scalars");
}

TEST_CASE("an output needs a shape") {
  SizeParam N("N");
  Input X("ns_X", f32, {N});
  Var i("i");
  Func f("ns_f");
  f(i) = X(i) * 2.0f;
  const Arguments args{{{"ns_X", random_normal(f32, {4}, 3)}}, {}};
  CHECK(
      error_of([&] { evaluate(f, args, Arithmetic::exact); }) ==
      "func 'ns_f' has no shape to be evaluated over; give it one with ns_f.set_shape({...}) (one extent per "
      "dimension)");
}

TEST_CASE("reading an input out of bounds is an error naming the input, the index and the shape") {
  SizeParam N("N");
  Input X("oob_X", f64, {N}), Y("oob_Y", f64, {N, N});
  Var i("i"), j("j");
  Func shifted("oob_shifted");
  shifted(i) = X(i + 1) - X(i);
  shifted.set_shape({N});  // one too many: the last point reads X(N)
  const Arguments args{{{"oob_X", random_normal(f64, {5}, 1)}, {"oob_Y", random_normal(f64, {5, 5}, 2)}}, {}};
  CHECK(error_of([&] { evaluate(shifted, args, Arithmetic::exact); }) ==
        "func 'oob_shifted' reads input 'oob_X' at index [5], outside its shape [5] (dimension 0)");

  // Inside a reduction, through a producer: the func that reads is named.
  RDom r(-1, N, "oob_r");
  Func producer("oob_producer"), consumer("oob_consumer");
  producer(i) = reduce(sum_monoid(f64), r, Y(i, r.x));
  consumer(i) = producer(i) * 2.0;
  consumer.set_shape({N});
  CHECK(error_of([&] { evaluate(consumer, args, Arithmetic::exact); }) ==
        "func 'oob_producer' reads input 'oob_Y' at index [0, -1], outside its shape [5, 5] (dimension 1)");

  // A read guarded by a select is made only where the guard holds.
  Func guarded("oob_guarded");
  guarded(i) = select(i + 1 < N, X(i + 1), 0.0) - X(i);
  guarded.set_shape({N});
  const HostTensor got = evaluate(guarded, args, Arithmetic::exact)[0];
  const HostTensor &x = args.inputs.at("oob_X");
  for (int64_t k = 0; k < 5; ++k) CHECK(got.get({k}) == (k + 1 < 5 ? x.get({k + 1}) : 0.0) - x.get({k}));
}
