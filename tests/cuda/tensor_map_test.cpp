// The host side of TMA tensor maps: the cuTensorMapEncodeTiled arguments built from a row-major request,
// and the requests the driver would refuse, refused with our message before any driver call.
#include <doctest/doctest.h>

#include "backends/cuda/runtime/nvrtc_compiler.h"
#include "backends/cuda/runtime/tensor_map.h"
#include "lang/error.h"
#include "tests/cuda/test_kernels.h"

using namespace twist;
using namespace twist::cuda;

namespace {

// A batch of 3 row-major 100x64 f16 matrices, read in 64x64 boxes with the 128-byte swizzle.
TensorMapRequest batched_f16() {
  return {.name = "A_map",
          .buffer = "A",
          .element = f16,
          .extents = {3, 100, 64},
          .box = {1, 64, 64},
          .swizzle_bytes = 128,
          .address = 0x7f0000001000};
}

}  // namespace

TEST_CASE("an encoding lists dimensions innermost first, with byte strides of the dense row-major tensor") {
  const TensorMapEncoding e = tensor_map_encoding(batched_f16());
  CHECK(e.data_type == CU_TENSOR_MAP_DATA_TYPE_FLOAT16);
  CHECK(e.rank == 3);
  CHECK(e.address == 0x7f0000001000);
  CHECK(e.dims[0] == 64);
  CHECK(e.dims[1] == 100);
  CHECK(e.dims[2] == 3);
  CHECK(e.strides[0] == 64 * 2);        // one row of 64 f16
  CHECK(e.strides[1] == 100 * 64 * 2);  // one matrix
  CHECK(e.box[0] == 64);
  CHECK(e.box[1] == 64);
  CHECK(e.box[2] == 1);
  for (int d = 0; d < 3; ++d) CHECK(e.element_strides[d] == 1);
  CHECK(e.swizzle == CU_TENSOR_MAP_SWIZZLE_128B);
  CHECK(e.interleave == CU_TENSOR_MAP_INTERLEAVE_NONE);
  CHECK(e.l2_promotion == CU_TENSOR_MAP_L2_PROMOTION_L2_128B);
  CHECK(e.oob_fill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

TEST_CASE("each element type and swizzle maps to the driver's enumerator") {
  TensorMapRequest r{.name = "m", .buffer = "b", .element = f32, .extents = {8, 32}, .box = {8, 8}};
  const std::pair<Type, CUtensorMapDataType> types[] = {{f16, CU_TENSOR_MAP_DATA_TYPE_FLOAT16},
                                                        {bf16, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16},
                                                        {f32, CU_TENSOR_MAP_DATA_TYPE_FLOAT32},
                                                        {f64, CU_TENSOR_MAP_DATA_TYPE_FLOAT64},
                                                        {i32, CU_TENSOR_MAP_DATA_TYPE_INT32}};
  for (const auto &[type, expected] : types) {
    r.element = type;
    CHECK(tensor_map_encoding(r).data_type == expected);
  }
  r.element = f16;  // a box row of 16 bytes fits every swizzle span
  const std::pair<int, CUtensorMapSwizzle> swizzles[] = {{0, CU_TENSOR_MAP_SWIZZLE_NONE},
                                                         {32, CU_TENSOR_MAP_SWIZZLE_32B},
                                                         {64, CU_TENSOR_MAP_SWIZZLE_64B},
                                                         {128, CU_TENSOR_MAP_SWIZZLE_128B}};
  for (const auto &[bytes, expected] : swizzles) {
    r.swizzle_bytes = bytes;
    CHECK(tensor_map_encoding(r).swizzle == expected);
  }
}

TEST_CASE(
    "requests the driver would refuse are refused first, naming the map, its extents, box and swizzle") {
  auto refused = [](TensorMapRequest r, const char *why) {
    CAPTURE(why);
    const char *map = "tensor map 'A_map' over buffer 'A'";
    CHECK_THROWS_WITH_AS(tensor_map_encoding(r), doctest::Contains(map), Error);
    CHECK_THROWS_WITH_AS(tensor_map_encoding(r), doctest::Contains(why), Error);
    // encode_tensor_map checks before it touches the driver, so the message is the same with or without a
    // GPU.
    CHECK_THROWS_WITH_AS(encode_tensor_map(r), doctest::Contains(why), Error);
  };
  TensorMapRequest r = batched_f16();
  r.box = {1, 257, 64};
  refused(r, "box dimension 1 is 257 elements, outside TMA's 1..256");
  r.box = {0, 64, 64};
  refused(r, "box dimension 0 is 0 elements");
  r = batched_f16();
  r.box = {1, 64, 12};
  r.swizzle_bytes = 0;
  refused(r, "the box's innermost row is 24 bytes, not a multiple of 16");
  r = batched_f16();
  r.box = {1, 64, 128};
  r.extents = {3, 100, 128};
  refused(r, "the box's innermost row is 256 bytes, wider than the 128-byte swizzle span");
  r = batched_f16();
  r.swizzle_bytes = 64;
  refused(r, "extents [3, 100, 64], box [1, 64, 64], swizzle 64B");
  r = batched_f16();
  r.extents = {3, 100, 100};
  r.box = {1, 64, 32};
  refused(r, "200 bytes apart from the next, not a multiple of 16");
  r = batched_f16();
  r.address += 8;
  refused(r, "is not 16-byte aligned");
  r = batched_f16();
  r.extents = {2, 2, 2, 2, 2, 64};
  r.box = {1, 1, 1, 1, 1, 64};
  refused(r, "TMA tensors have 1 to 5 dimensions, this one has 6");
  r = batched_f16();
  r.box = {64, 64};
  refused(r, "the box has 2 dimensions and the tensor 3");
  r = batched_f16();
  r.extents = {0, 100, 64};
  refused(r, "extent 0 of dimension 0 is outside 1..2^32");
  r = batched_f16();
  r.swizzle_bytes = 16;
  refused(r, "a swizzle spans 32, 64 or 128 bytes");
  r = batched_f16();
  r.element = Halide::Bool();
  refused(r, "TMA does not copy bool elements");
}

TEST_CASE("the GPU tests' TMA kernel (cp.async.bulk.tensor, mbarrier, cluster rank) compiles for sm_90a") {
  const CompileResult result = compile(test_kernels::kTmaBoxCopy, "tma_box_copy.cu", {.arch = "sm_90a"});
  REQUIRE(result.resources.size() == 1);
  CHECK(result.resources[0].spill_store_bytes == 0);
  CHECK(result.resources[0].stack_frame_bytes == 0);
}
