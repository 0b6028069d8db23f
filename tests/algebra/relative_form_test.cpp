// The relative form the lowering uses: its shape for the library's monoids, and folding tile by tile in
// relative form (selectors by their op, additive parts summed, rebased when the reference moves) gives the
// sequential fold's state.
#include <doctest/doctest.h>

#include <cmath>

#include "algebra/builtins.h"
#include "algebra/online.h"
#include "algebra/random_elements.h"
#include "algebra/relative_form.h"
#include "algebra/substitution.h"
#include "algebra/twist.h"
#include "test_support.h"

using namespace twist;
using namespace twist::algebra;
using namespace twist::algebra::testing;

TEST_SUITE_BEGIN("algebra");

namespace {

// A model of what the lowering does with a relative form, in one arithmetic.
class TileFolder {
 public:
  TileFolder(const RelativeForm &form, Arithmetic arithmetic) : form_(form) {
    const auto b = variable_names(form.base_vars());
    const auto x = variable_names(form.monoid->element());
    lift_ = VectorFunction(arithmetic, joined(x, {kReferenceName}), form.relative_lift);
    rebase_ = VectorFunction(arithmetic, joined(b, {kOldReferenceName, kNewReferenceName}), form.rebase);
    to_state_ = VectorFunction(arithmetic, joined(b, {kReferenceName}), form.to_state);
    identity_ = VectorFunction(arithmetic, {}, form.base_identity)({});
    if (form.has_reference) {
      reference_of_ = VectorFunction(arithmetic, joined(b, {kReferenceName}), {form.reference_of});
      initial_reference_ = VectorFunction(arithmetic, {}, {form.initial_reference})({})[0];
    }
  }

  // `offsets[t]` moves tile t's reference away from reference_of's choice (r-independence: any reference
  // gives the same state).
  Values fold(const std::vector<Values> &elements, int tile, const std::vector<Real> &offsets) const {
    Values b = identity_;
    Real ref = initial_reference_;
    for (size_t begin = 0, t = 0; begin < elements.size(); begin += tile, ++t) {
      const size_t end = std::min(elements.size(), begin + tile);
      // 1. the selectors, as they are
      Values selected = b;
      for (size_t j = begin; j < end; ++j) {
        const Values lifted = lift_(joined(elements[j], {ref}));
        for (size_t k = 0; k < b.size(); ++k) {
          if (form_.ops[k] == RelativeForm::BaseOp::max) selected[k] = std::fmax(selected[k], lifted[k]);
          if (form_.ops[k] == RelativeForm::BaseOp::min) selected[k] = std::fmin(selected[k], lifted[k]);
        }
      }
      // 2. the new reference
      Real new_ref = ref;
      if (form_.has_reference) {
        new_ref = reference_of_(joined(selected, {ref}))[0];
        if (std::isfinite(new_ref)) new_ref += offsets[t];
      }
      // 3. the additive components rebased, from the consistent old state
      const Values rebased = rebase_(joined(b, {ref, new_ref}));
      for (size_t k = 0; k < b.size(); ++k)
        b[k] = form_.is_selector(static_cast<int>(k)) ? selected[k] : rebased[k];
      // 4. the tile's contributions, a plain sum
      for (size_t j = begin; j < end; ++j) {
        const Values lifted = lift_(joined(elements[j], {new_ref}));
        for (size_t k = 0; k < b.size(); ++k)
          if (!form_.is_selector(static_cast<int>(k))) b[k] += lifted[k];
      }
      ref = new_ref;
    }
    return to_state_(joined(b, {ref}));
  }

 private:
  const RelativeForm &form_;
  VectorFunction lift_, rebase_, to_state_, reference_of_;
  Values identity_;
  Real initial_reference_ = 0;
};

}  // namespace

TEST_CASE("softmax's relative form is a max selector and an additive sum relative to the running max") {
  const auto form = relative_form(softmax(f32));
  REQUIRE(form);
  CHECK(form->ops == std::vector<RelativeForm::BaseOp>{RelativeForm::BaseOp::max, RelativeForm::BaseOp::add});
  CHECK(form->has_reference);
  CHECK(form->ref_type == f32);
  CHECK(Halide::Internal::equal(form->reference_of, form->base_vars()["m"]));
  CHECK(Halide::Internal::equal(form->rebase[0], form->base_vars()["m"]));
  const auto initial = form->initial_reference.as<Halide::Internal::FloatImm>();
  REQUIRE(initial);
  CHECK(initial->value == -INFINITY);
  // The rebase of l is l * exp(ref.old - ref.new), with exp(-inf - -inf) counted as 0.
  const VectorFunction rebase(
      Arithmetic::extended, joined(variable_names(form->base_vars()), {kOldReferenceName, kNewReferenceName}),
      form->rebase);
  CHECK(std::fabs(rebase({1.5, 2.0, 0.5, 1.5})[1] - 2.0L * std::exp(-1.0L)) < 1e-18L);
  CHECK(rebase({-INFINITY, 0.0, -INFINITY, -INFINITY})[1] == 0);
  CHECK(rebase({1.0, 3.0, -INFINITY, 1.0})[1] == 0);
}

TEST_CASE("a reference that is one of the selectors is named, so that lowerings keep no copy of it") {
  // softmax and attention move their reference to the running max, their selector m; Welford's is the mean,
  // an additive component, and the trivial product has none.
  for (const Monoid &m : {softmax(f32), attention(f32, 2)}) {
    const auto form = relative_form(m);
    REQUIRE(form);
    REQUIRE(form->reference_selector >= 0);
    CHECK(form->base[form->reference_selector].name == "m");
    CHECK(form->is_selector(form->reference_selector));
  }
  const auto welford_form = relative_form(welford(f64));
  REQUIRE(welford_form);
  CHECK(welford_form->has_reference);
  CHECK(welford_form->reference_selector == -1);
  CHECK(relative_form(product({sum(f32), max(f32)}))->reference_selector == -1);
}

TEST_CASE("simplified folds exact math of constants and products of selects on one condition") {
  const Expr m = variable(f32, "m"), n = variable(f32, "n");
  const Expr empty = m == neg_infinity(f32);
  auto same = [](const Halide::Expr &a, const Halide::Expr &b) {
    return Halide::Internal::equal(a, Halide::Internal::simplify(b));
  };
  // softmax's rebase factor with ref.old = m: 2^(m - m) is exactly 1, so the factor is one select.
  const Halide::Expr factor =
      simplified(select(empty, cast(f32, 0), exp2(m - m)) * select(empty, cast(f32, 0), exp2(m - n)));
  INFO(factor);
  CHECK(same(factor, select(empty, cast(f32, 0), exp2(m - n))));
  CHECK(same(simplified(exp2(cast(f32, 3))), cast(f32, 8)));
  // An inexact value is left to the target's function.
  CHECK(same(simplified(exp2(cast(f32, 0.5))), exp2(cast(f32, 0.5))));
  // Selects on different conditions stay apart.
  const Halide::Expr apart = select(empty, cast(f32, 0), m) * select(n > m, cast(f32, 0), n);
  CHECK(same(simplified(apart), apart));
}

TEST_CASE("attention's relative lift is the contraction exp(s - ref) * v") {
  const auto form = relative_form(attention(f64, 2));
  REQUIRE(form);
  const VectorFunction lift(Arithmetic::extended,
                            joined(variable_names(form->monoid->element()), {kReferenceName}),
                            form->relative_lift);
  const Values lifted = lift({1.0, 2.0, 3.0, 0.5});
  const Real p = std::exp(0.5L);
  CHECK(lifted[0] == 1);
  CHECK(std::fabs(lifted[1] - p) < 1e-18L);
  CHECK(std::fabs(lifted[2] - 2 * p) < 1e-17L);
  CHECK(std::fabs(lifted[3] - 3 * p) < 1e-17L);
  CHECK(lift({-INFINITY, 2.0, 3.0, -INFINITY}) == Values{-INFINITY, 0, 0, 0});
}

TEST_CASE("monoids without a componentwise base have no relative form and say why") {
  for (const Monoid &m :
       {argmax(f32), argmin(f64), affine(f64), product(f32), product({softmax(f32), sum(f32)})}) {
    CAPTURE(m.name);
    std::string why;
    CHECK(!relative_form(m, &why));
    CHECK(!why.empty());
  }
  const auto trivial = relative_form(product({sum(f32), max(f32), min(f32)}));
  REQUIRE(trivial);
  CHECK(!trivial->has_reference);
  CHECK(trivial->ops == std::vector<RelativeForm::BaseOp>{
                            RelativeForm::BaseOp::add, RelativeForm::BaseOp::max, RelativeForm::BaseOp::min});
}

TEST_CASE("folding tile by tile in relative form gives the sequential fold's state") {
  const std::vector<Monoid> monoids = {sum(f64),
                                       max(f64),
                                       min(f64),
                                       product({sum(f64), max(f64)}),
                                       softmax(f64),
                                       log_sum_exp(f64),
                                       attention(f64, 2),
                                       welford(f64),
                                       twisted_softmax(f64),
                                       twisted_attention(f64, 3),
                                       twisted_welford(f64),
                                       root_mean_square()};
  for (const Monoid &m : monoids) {
    CAPTURE(m.name);
    const auto form = relative_form(m);
    REQUIRE(form);
    const MonoidEvaluator ext(m, Arithmetic::extended), dbl(m, Arithmetic::exact);
    const TileFolder tiles_ext(*form, Arithmetic::extended), tiles_dbl(*form, Arithmetic::exact);
    const ElementSampler sampler(m.elements);
    // -inf (masked scores) where it means something: the max-like selections and the softmax sums.
    const bool masked = m.name.find("welford") == std::string::npos &&
                        m.name.find("root_mean") == std::string::npos &&
                        m.name.find("min") == std::string::npos;
    Rng rng(13);
    int compared = 0;
    for (int trial = 0; trial < 150; ++trial) {
      const Regime regime =
          masked && trial % 3 == 2 ? Regime::masked : (trial % 3 == 1 ? Regime::ties : Regime::spread);
      const int length = trial % 25;
      const std::vector<Values> x = sampler.list(rng, length, regime);
      for (int tile : {1, 3, 8}) {
        // Reference at reference_of's choice, then moved by random offsets: every reference must do.
        for (bool moved : {false, true}) {
          std::vector<Real> offsets;
          for (int t = 0; t <= length; ++t)
            offsets.push_back(moved ? std::uniform_real_distribution<double>(-2, 2)(rng) : 0.0);
          auto by_tiles = [&](const MonoidEvaluator &ev, const std::vector<Values> &list) {
            return (ev.arithmetic() == Arithmetic::extended ? tiles_ext : tiles_dbl)
                .fold(list, tile, offsets);
          };
          auto sequential = [](const MonoidEvaluator &ev, const std::vector<Values> &list) {
            return ev.fold(list);
          };
          const Evaluated got = evaluate(ext, dbl, m.elements, x, by_tiles);
          const Evaluated want = evaluate(ext, dbl, m.elements, x, sequential);
          if (has_nan(want.extended)) continue;
          INFO("tile ", tile, " moved ", moved, " length ", length, " got ", show(got.extended), " want ",
               show(want.extended));
          CHECK(agree(got, want));
          ++compared;
        }
      }
    }
    CHECK(compared > 800);
  }
}

TEST_SUITE_END();
