#include "backends/reference/host_tensor.h"

#include <cmath>
#include <cstring>
#include <random>

#include "lang/error.h"
#include "lang/float_formats.h"

namespace twist::reference {

namespace {

template <typename T>
T read_as(const std::vector<std::byte> &storage, int64_t offset) {
  T value;
  std::memcpy(&value, storage.data() + offset * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void write_as(std::vector<std::byte> &storage, int64_t offset, T value) {
  std::memcpy(storage.data() + offset * sizeof(T), &value, sizeof(T));
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t stride = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape[d];
  }
  return strides;
}

}  // namespace

std::string shape_string(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += (d ? ", " : "") + std::to_string(shape[d]);
  return s + "]";
}

HostTensor::HostTensor(const Type &type, std::vector<int64_t> shape)
    : HostTensor(type, shape, contiguous_strides(shape)) {}

HostTensor::HostTensor(const Type &type, std::vector<int64_t> shape, std::vector<int64_t> strides)
    : type_(type), format_(format_of(type)), shape_(std::move(shape)), strides_(std::move(strides)) {
  if (!is_element_type(type_))
    fail("a HostTensor holds f16, bf16, f32, f64 or i32, not {}", type_name(type_));
  if (strides_.size() != shape_.size())
    fail("a HostTensor of shape {} needs {} stride(s), but was given {}", shape_string(shape_), shape_.size(),
         strides_.size());
  size_ = 1;
  for (size_t d = 0; d < shape_.size(); ++d) {
    if (shape_[d] < 0)
      fail("HostTensor shape {} has a negative extent in dimension {}", shape_string(shape_), d);
    size_ *= shape_[d];
  }
  for (size_t d = 0; d < shape_.size(); ++d)
    if (strides_[d] <= 0)
      fail("HostTensor strides {} must be positive (dimension {})", shape_string(strides_), d);
  // Distinct indices reach distinct elements if, taking the dimensions from the smallest stride up, each
  // stride is at least the span of the dimensions below it.
  std::vector<size_t> order(shape_.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = d;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return strides_[a] < strides_[b]; });
  int64_t span = 1;
  for (size_t d : order) {
    if (shape_[d] > 1 && strides_[d] < span)
      fail(
          "HostTensor strides {} for shape {} make different indices share storage; each stride must be at "
          "least the extent times the stride of the next smaller one",
          shape_string(strides_), shape_string(shape_));
    span = std::max(span, strides_[d] * shape_[d]);
  }
  contiguous_ = strides_ == contiguous_strides(shape_);
  const int64_t elements = size_ == 0 ? 0 : span;
  storage_.assign(static_cast<size_t>(elements) * type_.bytes(), std::byte{0});
}

int64_t HostTensor::offset(std::span<const int64_t> index) const {
  if (static_cast<int>(index.size()) != rank())
    fail("index {} has {} component(s) but the tensor has rank {} (shape {})", shape_string(index),
         index.size(), rank(), shape_string(shape_));
  int64_t at = 0;
  for (size_t d = 0; d < index.size(); ++d) {
    if (index[d] < 0 || index[d] >= shape_[d])
      fail("index {} is out of bounds for shape {} (dimension {})", shape_string(index), shape_string(shape_),
           d);
    at += index[d] * strides_[d];
  }
  return at;
}

int64_t HostTensor::offset_of_linear(int64_t linear) const {
  if (linear < 0 || linear >= size_)
    fail("linear index {} is out of bounds for shape {} ({} elements)", linear, shape_string(shape_), size_);
  if (contiguous_) return linear;
  int64_t at = 0;
  for (size_t d = shape_.size(); d-- > 0;) {
    at += (linear % shape_[d]) * strides_[d];
    linear /= shape_[d];
  }
  return at;
}

HostTensor::Format HostTensor::format_of(const Type &type) {
  if (type == f16) return Format::f16;
  if (type == bf16) return Format::bf16;
  if (type == f32) return Format::f32;
  if (type == f64) return Format::f64;
  return Format::i32;
}

double HostTensor::load(int64_t at) const {
  switch (format_) {
    case Format::f16:
      return from_f16_bits(read_as<uint16_t>(storage_, at));
    case Format::bf16:
      return from_bf16_bits(read_as<uint16_t>(storage_, at));
    case Format::f32:
      return read_as<float>(storage_, at);
    case Format::f64:
      return read_as<double>(storage_, at);
    case Format::i32:
      break;
  }
  return read_as<int32_t>(storage_, at);
}

bool HostTensor::store(int64_t at, double value) {
  switch (format_) {
    case Format::f16:
      write_as<uint16_t>(storage_, at, f16_bits(value));
      return true;
    case Format::bf16:
      write_as<uint16_t>(storage_, at, bf16_bits(value));
      return true;
    case Format::f32:
      write_as<float>(storage_, at, static_cast<float>(value));
      return true;
    case Format::f64:
      write_as<double>(storage_, at, value);
      return true;
    case Format::i32:
      break;
  }
  if (!(value == std::trunc(value) && value >= INT32_MIN && value <= INT32_MAX)) return false;
  write_as<int32_t>(storage_, at, static_cast<int32_t>(value));
  return true;
}

namespace {

[[noreturn]] void refuse_i32(double value, const std::string &where) {
  fail("cannot store {} at {} of an i32 tensor: it holds integers in [{}, {}]; round the value first", value,
       where, INT32_MIN, INT32_MAX);
}

}  // namespace

double HostTensor::get(std::span<const int64_t> index) const {
  return load(offset(index));
}

void HostTensor::set(std::span<const int64_t> index, double value) {
  if (!store(offset(index), value)) refuse_i32(value, "index " + shape_string(index));
}

double HostTensor::get_linear(int64_t linear) const {
  return load(offset_of_linear(linear));
}

void HostTensor::set_linear(int64_t linear, double value) {
  if (!store(offset_of_linear(linear), value)) refuse_i32(value, "linear index " + std::to_string(linear));
}

void HostTensor::fill(double value) {
  for (int64_t k = 0; k < size_; ++k) set_linear(k, value);
}

namespace {

template <typename Draw>
HostTensor random_tensor(const Type &type, std::vector<int64_t> shape, Draw draw) {
  HostTensor t(type, std::move(shape));
  for (int64_t k = 0; k < t.size(); ++k) t.set_linear(k, draw());
  return t;
}

}  // namespace

HostTensor random_normal(const Type &type, std::vector<int64_t> shape, uint64_t seed, double mean,
                         double stddev) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(mean, stddev);
  const bool integral = type == i32;
  return random_tensor(type, std::move(shape), [&] {
    const double x = normal(rng);
    return integral ? std::nearbyint(x) : x;
  });
}

HostTensor random_uniform(const Type &type, std::vector<int64_t> shape, uint64_t seed, double lo, double hi) {
  if (!(lo <= hi)) fail("random_uniform needs lo <= hi, got [{}, {}]", lo, hi);
  std::mt19937_64 rng(seed);
  if (type == i32) {
    const double first = std::ceil(lo), last = std::floor(hi);
    if (first > last) fail("random_uniform: [{}, {}] holds no integer for an i32 tensor", lo, hi);
    std::uniform_int_distribution<int64_t> uniform(static_cast<int64_t>(first), static_cast<int64_t>(last));
    return random_tensor(type, std::move(shape), [&] { return static_cast<double>(uniform(rng)); });
  }
  std::uniform_real_distribution<double> uniform(lo, hi);
  return random_tensor(type, std::move(shape), [&] { return uniform(rng); });
}

namespace {

// Calls fn(got, want) for every element; returns false as soon as `got` is not finite.
template <typename Fn>
bool each_pair(const char *what, const HostTensor &got, const HostTensor &want, Fn fn) {
  if (got.shape() != want.shape())
    fail("{}: the result has shape {} but the reference has shape {}", what, shape_string(got.shape()),
         shape_string(want.shape()));
  for (int64_t k = 0; k < got.size(); ++k) {
    const double g = got.get_linear(k), w = want.get_linear(k);
    if (!std::isfinite(w))
      fail("{}: the reference holds {} at linear index {}; a reference must be finite", what, w, k);
    if (!std::isfinite(g)) return false;
    fn(static_cast<long double>(g), static_cast<long double>(w));
  }
  return true;
}

}  // namespace

double relative_l2_error(const HostTensor &got, const HostTensor &want) {
  long double difference = 0, reference = 0;
  const bool finite = each_pair("relative_l2_error", got, want, [&](long double g, long double w) {
    difference += (g - w) * (g - w);
    reference += w * w;
  });
  if (!finite) return INFINITY;
  if (reference == 0) return static_cast<double>(std::sqrt(difference));
  return static_cast<double>(std::sqrt(difference / reference));
}

double max_abs_error(const HostTensor &got, const HostTensor &want) {
  long double largest = 0;
  const bool finite = each_pair("max_abs_error", got, want, [&](long double g, long double w) {
    largest = std::max(largest, std::fabs(g - w));
  });
  return finite ? static_cast<double>(largest) : INFINITY;
}

}  // namespace twist::reference
