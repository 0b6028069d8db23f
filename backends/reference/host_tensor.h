#pragma once
// A tensor in host memory, stored in its element type's own format (f16 and bf16 as 16-bit patterns, f32 as
// float, f64 as double, i32 as int32) so that its bytes can be copied to a GPU as they are. Values go in
// and out as doubles, which hold every value of every element type exactly.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "lang/types.h"

namespace twist::reference {

class HostTensor {
 public:
  HostTensor() = default;
  // A zero-filled tensor. The shape is row-major as in PyTorch: dimension 0 is the outermost (slowest
  // varying), and by default the strides are those of a contiguous tensor.
  HostTensor(const Type &type, std::vector<int64_t> shape);
  // With explicit strides, in elements (for example {1, rows} for a column-major matrix). Strides must be
  // positive, and distinct indices must reach distinct elements.
  HostTensor(const Type &type, std::vector<int64_t> shape, std::vector<int64_t> strides);

  const Type &type() const { return type_; }
  const std::vector<int64_t> &shape() const { return shape_; }
  const std::vector<int64_t> &strides() const { return strides_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t size() const { return size_; }  // the number of elements

  // By multi-index (one index per dimension, dimension 0 first). An index out of bounds throws.
  double get(std::span<const int64_t> index) const;
  double get(std::initializer_list<int64_t> index) const {
    return get(std::span(index.begin(), index.size()));
  }
  // Stores value rounded to the element type (to nearest, ties to even). An i32 tensor takes only integral
  // values in its range, and throws otherwise.
  void set(std::span<const int64_t> index, double value);
  void set(std::initializer_list<int64_t> index, double value) {
    set(std::span(index.begin(), index.size()), value);
  }

  // By linear index: the position of the element in row-major order, in [0, size()), whatever the strides.
  double get_linear(int64_t linear) const;
  void set_linear(int64_t linear, double value);

  void fill(double value);

  // The storage, in the element type's own format; element k of the storage is at byte k * element_bytes().
  std::span<const std::byte> bytes() const { return storage_; }
  std::span<std::byte> bytes() { return storage_; }
  int element_bytes() const { return type_.bytes(); }

 private:
  int64_t offset(std::span<const int64_t> index) const;
  int64_t offset_of_linear(int64_t linear) const;
  // How the elements are stored, decided once so that element access is a switch.
  enum class Format { f16, bf16, f32, f64, i32 };
  static Format format_of(const Type &type);
  double load(int64_t offset) const;
  bool store(int64_t offset, double value);  // false for a value an i32 cannot hold

  Type type_ = f32;
  Format format_ = Format::f32;
  std::vector<int64_t> shape_, strides_;
  int64_t size_ = 0;
  bool contiguous_ = true;
  std::vector<std::byte> storage_;
};

// "[64, 61]": how shapes and indices appear in messages.
std::string shape_string(std::span<const int64_t> shape);

// Random tensors, the same for the same seed. Values are drawn in double and rounded to the element type;
// for i32, normal draws are rounded to the nearest integer and uniform draws are integers in [lo, hi].
HostTensor random_normal(const Type &type, std::vector<int64_t> shape, uint64_t seed, double mean = 0.0,
                         double stddev = 1.0);
HostTensor random_uniform(const Type &type, std::vector<int64_t> shape, uint64_t seed, double lo, double hi);

// ||got - want|| / ||want|| in the 2-norm, summed in long double. A NaN or infinity in `got` gives +inf,
// so that a broken result never passes a tolerance. Where `want` is zero everywhere the relative error is
// undefined, and this returns the absolute norm ||got - want|| instead. The shapes must be equal, and
// `want` (the reference) must be finite; otherwise it throws.
double relative_l2_error(const HostTensor &got, const HostTensor &want);
// max |got - want| over all elements; +inf if `got` holds a NaN or an infinity. The same checks as above.
double max_abs_error(const HostTensor &got, const HostTensor &want);

}  // namespace twist::reference
