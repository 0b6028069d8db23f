#include "backends/cuda/runtime/tensor_map.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/cuda/runtime/driver_api.h"
#include "lang/error.h"

namespace twist::cuda {

namespace {

CUtensorMapDataType data_type_of(const TensorMapRequest &r) {
  if (r.element == f16) return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  if (r.element == bf16) return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  if (r.element == f32) return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  if (r.element == f64) return CU_TENSOR_MAP_DATA_TYPE_FLOAT64;
  if (r.element == i32) return CU_TENSOR_MAP_DATA_TYPE_INT32;
  fail("{}: TMA does not copy {} elements; stage this tensor with Transport::cp_async instead", describe(r),
       type_name(r.element));
}

CUtensorMapSwizzle swizzle_of(const TensorMapRequest &r) {
  switch (r.swizzle_bytes) {
    case 0:
      return CU_TENSOR_MAP_SWIZZLE_NONE;
    case 32:
      return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64:
      return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128:
      return CU_TENSOR_MAP_SWIZZLE_128B;
    default:
      fail("{}: a swizzle spans 32, 64 or 128 bytes (or 0 for none), not {}", describe(r), r.swizzle_bytes);
  }
}

}  // namespace

std::string describe(const TensorMapRequest &r) {
  return fmt::format("tensor map '{}' over buffer '{}' ({}, extents [{}], box [{}], swizzle {})", r.name,
                     r.buffer, type_name(r.element), fmt::join(r.extents, ", "), fmt::join(r.box, ", "),
                     r.swizzle_bytes == 0 ? std::string("none") : fmt::format("{}B", r.swizzle_bytes));
}

TensorMapEncoding tensor_map_encoding(const TensorMapRequest &r) {
  TensorMapEncoding e;
  e.data_type = data_type_of(r);
  e.swizzle = swizzle_of(r);
  const int rank = static_cast<int>(r.extents.size());
  if (rank < 1 || rank > 5)
    fail(
        "{}: TMA tensors have 1 to 5 dimensions, this one has {}; fold dimensions together in the map's "
        "extents",
        describe(r), rank);
  if (r.box.size() != r.extents.size())
    fail("{}: the box has {} dimensions and the tensor {}; give one box size per extent", describe(r),
         r.box.size(), rank);
  const int64_t element_bytes = r.element.bytes();
  if (r.address % 16 != 0)
    fail(
        "{}: its address {:#x} is not 16-byte aligned, which TMA requires; allocate or offset the buffer to "
        "a "
        "multiple of 16 bytes",
        describe(r), r.address);
  for (int d = 0; d < rank; ++d) {
    if (r.extents[d] < 1 || r.extents[d] > (int64_t{1} << 32))
      fail("{}: extent {} of dimension {} is outside 1..2^32; TMA cannot describe an empty or larger tensor",
           describe(r), r.extents[d], d);
    if (r.box[d] < 1 || r.box[d] > 256)
      fail("{}: box dimension {} is {} elements, outside TMA's 1..256; use a smaller tile in that dimension",
           describe(r), d, r.box[d]);
  }
  const int64_t box_row_bytes = r.box.back() * element_bytes;
  if (box_row_bytes % 16 != 0)
    fail(
        "{}: the box's innermost row is {} bytes, not a multiple of 16; make the tile's innermost extent a "
        "multiple of {} elements",
        describe(r), box_row_bytes, 16 / element_bytes);
  if (r.swizzle_bytes != 0 && box_row_bytes > r.swizzle_bytes)
    fail(
        "{}: the box's innermost row is {} bytes, wider than the {}-byte swizzle span; use a box row of at "
        "most "
        "{} elements or a wider swizzle",
        describe(r), box_row_bytes, r.swizzle_bytes, r.swizzle_bytes / element_bytes);
  e.rank = static_cast<cuuint32_t>(rank);
  e.address = r.address;
  int64_t stride = element_bytes;
  for (int i = 0; i < rank; ++i) {
    const int d = rank - 1 - i;  // innermost first
    e.dims[i] = static_cast<cuuint64_t>(r.extents[d]);
    e.box[i] = static_cast<cuuint32_t>(r.box[d]);
    e.element_strides[i] = 1;
    if (i > 0) {
      if (stride % 16 != 0)
        fail(
            "{}: a row of dimension {} is {} bytes apart from the next, not a multiple of 16 as TMA "
            "requires; "
            "the lowering must require the innermost extent to be a multiple of {} elements (see "
            "Requirement)",
            describe(r), d, stride, 16 / element_bytes);
      if (stride >= (int64_t{1} << 40))
        fail("{}: the stride of dimension {} is {} bytes, at or past TMA's 2^40; split the tensor",
             describe(r), d, stride);
      e.strides[i - 1] = static_cast<cuuint64_t>(stride);
    }
    stride *= r.extents[d];
  }
  return e;
}

CUtensorMap encode_tensor_map(const TensorMapRequest &r) {
  const TensorMapEncoding e = tensor_map_encoding(r);
  const DriverApi &api = driver();
  if (api.cuTensorMapEncodeTiled == nullptr)
    fail(
        "{} cannot be encoded: the CUDA driver does not export cuTensorMapEncodeTiled (TMA needs CUDA 12 and "
        "compute capability 9.0); update the driver or schedule the kernel without Transport::tma",
        describe(r));
  CUtensorMap map;
  check(api.cuTensorMapEncodeTiled(&map, e.data_type, e.rank, reinterpret_cast<void *>(e.address),
                                   e.dims.data(), e.strides.data(), e.box.data(), e.element_strides.data(),
                                   e.interleave, e.swizzle, e.l2_promotion, e.oob_fill),
        "cuTensorMapEncodeTiled", "encoding " + describe(r));
  return map;
}

}  // namespace twist::cuda
