#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "backends/reference/host_tensor.h"
#include "lang/error.h"
#include "lang/float_formats.h"
#include "tests/error_capture.h"

using twist::testing::contains;
using twist::testing::error_of;

using namespace twist;
using namespace twist::reference;

namespace {

template <typename T>
T raw(const HostTensor &t, int64_t storage_offset) {
  T value;
  std::memcpy(&value, t.bytes().data() + storage_offset * sizeof(T), sizeof(T));
  return value;
}

}  // namespace

TEST_CASE("a new tensor is contiguous, row-major and zero-filled") {
  HostTensor t(f16, {3, 4, 5});
  CHECK(t.rank() == 3);
  CHECK(t.size() == 60);
  CHECK(t.strides() == std::vector<int64_t>{20, 5, 1});
  CHECK(t.element_bytes() == 2);
  CHECK(t.bytes().size() == 120);
  for (int64_t k = 0; k < t.size(); ++k) CHECK(t.get_linear(k) == 0.0);
  CHECK(HostTensor(f64, {2, 2}).bytes().size() == 32);
  CHECK(HostTensor(i32, {7}).bytes().size() == 28);
  CHECK(HostTensor(bf16, {0, 3}).size() == 0);
}

TEST_CASE("values are stored in the element type's own format, rounded to nearest even") {
  HostTensor h(f16, {2}), b(bf16, {2}), s(f32, {2}), d(f64, {2}), n(i32, {2});
  h.set({1}, 0.1);
  CHECK(raw<uint16_t>(h, 1) == 0x2E66);
  CHECK(h.get({1}) == from_f16_bits(0x2E66));
  h.set({0}, 2049.0);  // a tie: to the even neighbour 2048
  CHECK(raw<uint16_t>(h, 0) == 0x6800);
  CHECK(h.get({0}) == 2048.0);
  b.set({0}, 1.0 + 3 * std::ldexp(1.0, -8));
  CHECK(raw<uint16_t>(b, 0) == 0x3F82);
  s.set({1}, 0.1);
  CHECK(raw<float>(s, 1) == 0.1f);
  CHECK(s.get({1}) == static_cast<double>(0.1f));
  d.set({0}, 0.1);
  CHECK(raw<double>(d, 0) == 0.1);
  n.set({1}, -123456.0);
  CHECK(raw<int32_t>(n, 1) == -123456);
  CHECK(n.get({1}) == -123456.0);
  CHECK(contains(error_of([&] { n.set({0}, 2.5); }), "cannot store 2.5 at index [0] of an i32 tensor"));
  CHECK(contains(error_of([&] { n.set_linear(1, 3e9); }), "cannot store 3000000000 at linear index 1"));
  CHECK(contains(error_of([&] { n.set({0}, NAN); }), "of an i32 tensor"));
}

TEST_CASE("multi-index and linear index agree in row-major order, whatever the strides") {
  HostTensor t(f64, {3, 4, 5});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 5; ++k) t.set({i, j, k}, i * 100 + j * 10 + k);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t k = 0; k < 5; ++k) {
        CHECK(t.get_linear(i * 20 + j * 5 + k) == i * 100 + j * 10 + k);
        CHECK(raw<double>(t, i * 20 + j * 5 + k) == i * 100 + j * 10 + k);
      }
  // A column-major matrix: element (i, j) lives at storage offset i + 3 * j.
  HostTensor c(f32, {3, 4}, {1, 3});
  CHECK(c.bytes().size() == 12 * 4);
  for (int64_t k = 0; k < 12; ++k) c.set_linear(k, k + 0.5);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      CHECK(c.get({i, j}) == i * 4 + j + 0.5);
      CHECK(raw<float>(c, i + 3 * j) == i * 4 + j + 0.5);
    }
  // Padded rows: a stride larger than the extent below it.
  HostTensor p(i32, {2, 3}, {8, 1});
  p.fill(7);
  for (int64_t k = 0; k < 6; ++k) CHECK(p.get_linear(k) == 7);
  CHECK(raw<int32_t>(p, 8) == 7);
  CHECK(raw<int32_t>(p, 3) == 0);  // padding is not an element
}

TEST_CASE("bad shapes, strides and indices are refused with what was wrong") {
  CHECK(contains(error_of([] {
                   HostTensor(f32, {2, -1});
                 }),
                 "shape [2, -1] has a negative extent in dimension 1"));
  CHECK(contains(error_of([] { HostTensor(f32, {2, 3}, {1}); }), "needs 2 stride(s), but was given 1"));
  CHECK(contains(error_of([] { HostTensor(f32, {2, 3}, {2, 1}); }), "make different indices share storage"));
  CHECK(contains(error_of([] { HostTensor(f32, {2, 3}, {3, 0}); }), "must be positive"));
  CHECK(contains(error_of([] { HostTensor(boolean, {2}); }), "not bool"));
  HostTensor t(f32, {2, 3});
  CHECK(contains(error_of([&] {
                   t.get({1, 3});
                 }),
                 "index [1, 3] is out of bounds for shape [2, 3] (dimension 1)"));
  CHECK(contains(error_of([&] { t.get({-1, 0}); }), "index [-1, 0] is out of bounds"));
  CHECK(contains(error_of([&] { t.get({1}); }), "index [1] has 1 component(s) but the tensor has rank 2"));
  CHECK(contains(error_of([&] { t.get_linear(6); }),
                 "linear index 6 is out of bounds for shape [2, 3] (6 elements)"));
}

TEST_CASE("random tensors are deterministic and have the asked-for distribution") {
  const HostTensor a = random_normal(f32, {200, 500}, 42, 3.0, 2.0);
  const HostTensor same = random_normal(f32, {200, 500}, 42, 3.0, 2.0);
  const HostTensor other = random_normal(f32, {200, 500}, 43, 3.0, 2.0);
  CHECK(std::equal(a.bytes().begin(), a.bytes().end(), same.bytes().begin()));
  CHECK(!std::equal(a.bytes().begin(), a.bytes().end(), other.bytes().begin()));
  double sum = 0, squares = 0;
  int zeros = 0;
  for (int64_t k = 0; k < a.size(); ++k) {
    sum += a.get_linear(k);
    zeros += a.get_linear(k) == 0;
  }
  const double mean = sum / a.size();
  for (int64_t k = 0; k < a.size(); ++k) squares += (a.get_linear(k) - mean) * (a.get_linear(k) - mean);
  CHECK(std::fabs(mean - 3.0) < 0.03);  // the standard error of the mean is 2 / sqrt(1e5) = 0.006
  CHECK(std::fabs(std::sqrt(squares / a.size()) - 2.0) < 0.03);
  CHECK(zeros == 0);

  const HostTensor h = random_normal(f16, {1000}, 1);
  for (int64_t k = 0; k < h.size(); ++k) CHECK(from_f16_bits(f16_bits(h.get_linear(k))) == h.get_linear(k));

  const HostTensor u = random_uniform(f64, {10000}, 5, -1.5, 4.0);
  double lo = INFINITY, hi = -INFINITY, total = 0;
  for (int64_t k = 0; k < u.size(); ++k) {
    lo = std::min(lo, u.get_linear(k));
    hi = std::max(hi, u.get_linear(k));
    total += u.get_linear(k);
  }
  CHECK(lo >= -1.5);
  CHECK(hi <= 4.0);
  CHECK(lo < -1.4);
  CHECK(hi > 3.9);
  CHECK(std::fabs(total / u.size() - 1.25) < 0.05);

  const HostTensor n = random_uniform(i32, {1000}, 9, -3, 3);
  std::vector<int> counts(7, 0);
  for (int64_t k = 0; k < n.size(); ++k) {
    const double v = n.get_linear(k);
    REQUIRE(v == std::trunc(v));
    REQUIRE(v >= -3);
    REQUIRE(v <= 3);
    ++counts[static_cast<int>(v) + 3];
  }
  for (int c : counts) CHECK(c > 100);  // each of the 7 values about 143 times
  CHECK(contains(error_of([] { random_uniform(i32, {2}, 1, 0.2, 0.8); }), "holds no integer"));
  CHECK(contains(error_of([] { random_uniform(f32, {2}, 1, 1.0, 0.0); }), "needs lo <= hi"));
}

TEST_CASE("relative L2 error and max abs error") {
  HostTensor got(f16, {2, 2}), want(f64, {2, 2});
  const double g[] = {1.0, -2.0, 3.5, 0.25}, w[] = {1.5, -2.0, 3.0, 1.0};
  for (int k = 0; k < 4; ++k) {
    got.set_linear(k, g[k]);
    want.set_linear(k, w[k]);
  }
  // By hand: the differences are -0.5, 0, 0.5, -0.75; ||d||^2 = 1.0625, ||want||^2 = 2.25 + 4 + 9 + 1.
  CHECK(relative_l2_error(got, want) == doctest::Approx(std::sqrt(1.0625 / 16.25)).epsilon(1e-15));
  CHECK(max_abs_error(got, want) == 0.75);
  CHECK(relative_l2_error(want, want) == 0.0);

  // A reference that is zero everywhere: the absolute norm.
  HostTensor zero(f32, {2}), small(f32, {2});
  small.set({0}, 3.0);
  small.set({1}, -4.0);
  CHECK(relative_l2_error(small, zero) == 5.0);

  HostTensor broken = want;
  broken.set({1, 0}, NAN);
  CHECK(relative_l2_error(broken, want) == INFINITY);
  CHECK(max_abs_error(broken, want) == INFINITY);
  broken.set({1, 0}, -INFINITY);
  CHECK(relative_l2_error(broken, want) == INFINITY);
  CHECK(contains(error_of([&] { relative_l2_error(want, broken); }),
                 "the reference holds -inf at linear index 2"));

  HostTensor wrong_shape(f64, {4});
  CHECK(contains(error_of([&] { relative_l2_error(wrong_shape, want); }),
                 "the result has shape [4] but the reference has shape [2, 2]"));
  CHECK(contains(error_of([&] { max_abs_error(got, wrong_shape); }), "max_abs_error"));
}
