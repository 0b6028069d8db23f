#pragma once
// TMA tensor maps (CUtensorMap) encoded on the host with cuTensorMapEncodeTiled. A request describes a
// dense row-major tensor the way the loop-nest IR does (dimension 0 outermost); the encoding is the
// driver's view of it (dimension 0 innermost, byte strides, driver enums). Every rule the driver documents
// for tiled maps is checked before the driver is called, so a refused map is reported with the map's name,
// extents, box and swizzle instead of a bare CUDA_ERROR_INVALID_VALUE.
#include <cuda.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "lang/types.h"

namespace twist::cuda {

struct TensorMapRequest {
  std::string name;              // the kernel parameter, for messages
  std::string buffer;            // the tensor it describes, for messages
  Type element;                  // f16, bf16, f32, f64 or i32
  std::vector<int64_t> extents;  // dimension 0 outermost; the tensor is dense row-major
  std::vector<int> box;          // elements per box dimension, dimension 0 outermost
  int swizzle_bytes = 0;         // 0 (none), 32, 64 or 128: the span within which 16-byte chunks are swizzled
  CUdeviceptr address = 0;       // the tensor's first element
};

// The arguments of cuTensorMapEncodeTiled, dimension 0 innermost. Out-of-bounds elements read as zero
// (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), no interleave, 128-byte L2 promotion, every element stride 1.
struct TensorMapEncoding {
  CUtensorMapDataType data_type = CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  cuuint32_t rank = 0;
  CUdeviceptr address = 0;
  std::array<cuuint64_t, 5> dims{};
  std::array<cuuint64_t, 4> strides{};  // bytes between consecutive indices of dimensions 1..rank-1
  std::array<cuuint32_t, 5> box{};
  std::array<cuuint32_t, 5> element_strides{};
  CUtensorMapInterleave interleave = CU_TENSOR_MAP_INTERLEAVE_NONE;
  CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE;
  CUtensorMapL2promotion l2_promotion = CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
  CUtensorMapFloatOOBfill oob_fill = CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE;
};

// "tensor map 'A_map' over buffer 'A' (f16, extents [512, 100], box [64, 64], swizzle 128B)".
std::string describe(const TensorMapRequest &request);

// The encoding of `request`. Throws twist::Error, naming the map and what to change, when the driver would
// refuse it: rank outside 1..5, an extent of 0 or over 2^32, a box dimension outside 1..256, an innermost box
// row that is not a multiple of 16 bytes or is wider than the swizzle span, a row stride that is not a
// multiple of 16 bytes or reaches 2^40, an address not 16-byte aligned, an element type TMA does not copy.
// Needs no GPU.
TensorMapEncoding tensor_map_encoding(const TensorMapRequest &request);

// cuTensorMapEncodeTiled of the encoding of `request`, through the process's driver. Throws as
// tensor_map_encoding does, when the driver lacks TMA, or when it refuses the map (naming the map).
CUtensorMap encode_tensor_map(const TensorMapRequest &request);

}  // namespace twist::cuda
