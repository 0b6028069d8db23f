// Kernel parameters as the launch passes them: buffers, scalars, then tensor maps, each at the position the
// printed signature declares it; tensor maps requested from the IR's descriptions over the right buffers.
#include <doctest/doctest.h>

#include <cstring>

#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/cuda/program/kernel_arguments.h"
#include "backends/cuda/runtime/nvrtc_compiler.h"
#include "lang/error.h"

using namespace twist;
using namespace twist::cuda;
using Halide::Expr;

namespace {

Expr var(const char *name) {
  return Halide::Internal::Variable::make(Halide::Int(32), name);
}

// C[B * M, N] = A[B, M, K] ..., described the way a TMA lowering would: A's batch folded into its rows.
twist::Kernel tma_kernel() {
  twist::Kernel k;
  k.name = "tma_kernel";
  k.grid = {Expr(1), Expr(1), Expr(1)};
  k.threads = 128;
  k.buffers = {{"C", f32, {var("B") * var("M"), var("N")}, BufferArg::Role::output},
               {"A", f16, {var("B"), var("M"), var("K")}, BufferArg::Role::input}};
  k.scalars = {{"M", i32}, {"alpha", f32}};
  k.tensor_maps = {{"A_map", "A", {var("B") * var("M"), var("K")}, {64, 64}, TensorMap::Swizzle::b128},
                   {"C_map", "C", {var("B") * var("M"), var("N")}, {64, 32}, TensorMap::Swizzle::none}};
  k.body = Halide::Internal::Evaluate::make(0);
  return k;
}

const Scalars kScalars = {{"B", 2}, {"M", 100}, {"N", 48}, {"K", 64}, {"alpha", 0.5}};

}  // namespace

TEST_CASE("a tensor map request evaluates the map's extents and takes the element type from its buffer") {
  const twist::Kernel k = tma_kernel();
  const TensorMapRequest a = tensor_map_request(k, k.tensor_maps[0], kScalars, 0x1000);
  CHECK(a.name == "A_map");
  CHECK(a.buffer == "A");
  CHECK(a.element == f16);
  CHECK(a.extents == std::vector<int64_t>{200, 64});
  CHECK(a.box == std::vector<int>{64, 64});
  CHECK(a.swizzle_bytes == 128);
  CHECK(a.address == 0x1000);
  CHECK(tensor_map_request(k, k.tensor_maps[1], kScalars, 0x2000).element == f32);
}

TEST_CASE("a tensor map over a buffer the kernel lacks, or not covering its buffer, is refused") {
  twist::Kernel k = tma_kernel();
  k.tensor_maps[0].buffer = "Q";
  CHECK_THROWS_WITH_AS(
      tensor_map_request(k, k.tensor_maps[0], kScalars, 0x1000),
      doctest::Contains("tensor map 'A_map' describes buffer 'Q', which is not one of the kernel's"), Error);
  k = tma_kernel();
  k.tensor_maps[0].extents = {var("M"), var("K")};
  CHECK_THROWS_WITH_AS(
      tensor_map_request(k, k.tensor_maps[0], kScalars, 0x1000),
      doctest::Contains("covers 6400 elements but buffer 'A' of shape [2, 100, 64] has 12800"), Error);
}

TEST_CASE("kernel arguments are the buffers' addresses, the scalars' values, then the encoded tensor maps") {
  const twist::Kernel k = tma_kernel();
  std::vector<TensorMapRequest> requested;
  auto record = [&](const TensorMapRequest &r) {
    requested.push_back(r);
    CUtensorMap map{};
    map.opaque[0] = r.address;  // a marker: which buffer this map was encoded over
    map.opaque[15] = requested.size();
    return map;
  };
  KernelArguments args(k, {{"A", 0xa000}, {"C", 0xc000}, {"unused", 0xf000}}, kScalars, record);
  REQUIRE(args.count() == 6);
  void **p = args.pointers();
  CHECK(*static_cast<CUdeviceptr *>(p[0]) == 0xc000);  // C: the buffers in the kernel's order
  CHECK(*static_cast<CUdeviceptr *>(p[1]) == 0xa000);
  int32_t m = 0;
  float alpha = 0;
  std::memcpy(&m, p[2], 4);
  std::memcpy(&alpha, p[3], 4);
  CHECK(m == 100);
  CHECK(alpha == 0.5f);
  const auto *a_map = static_cast<const CUtensorMap *>(p[4]);
  const auto *c_map = static_cast<const CUtensorMap *>(p[5]);
  CHECK(a_map->opaque[0] == 0xa000);
  CHECK(a_map->opaque[15] == 1);
  CHECK(c_map->opaque[0] == 0xc000);
  CHECK(c_map->opaque[15] == 2);
  CHECK(reinterpret_cast<uintptr_t>(a_map) % 128 == 0);  // as cuda.h declares CUtensorMap
  REQUIRE(requested.size() == 2);
  CHECK(requested[0].extents == std::vector<int64_t>{200, 64});
  CHECK(requested[1].extents == std::vector<int64_t>{200, 48});
  CHECK(requested[1].swizzle_bytes == 0);
}

TEST_CASE("kernel arguments without a buffer's address or a scalar's value are refused, naming it") {
  const twist::Kernel k = tma_kernel();
  auto never = [](const TensorMapRequest &) -> CUtensorMap {
    FAIL("no map should be encoded");
    return {};
  };
  CHECK_THROWS_WITH_AS(KernelArguments(k, {{"C", 0xc000}}, kScalars, never),
                       doctest::Contains("kernel tma_kernel reads buffer 'A', but no device buffer"), Error);
  Scalars without_alpha = kScalars;
  without_alpha.erase("alpha");
  CHECK_THROWS_WITH_AS(KernelArguments(k, {{"A", 0xa000}, {"C", 0xc000}}, without_alpha, never),
                       doctest::Contains("kernel tma_kernel takes scalar 'alpha', but no value"), Error);
}

TEST_CASE("a buffer past the 32-bit offsets' reach, or a scalar past 32 bits, is refused before launch") {
  const twist::Kernel k = tma_kernel();
  auto never = [](const TensorMapRequest &) -> CUtensorMap {
    FAIL("no map should be encoded");
    return {};
  };
  // A is [B, M, K]: 2^31 elements at B = 2^15, M = 1024, K = 64, one past the largest offset an int holds.
  Scalars huge = kScalars;
  huge["B"] = 32768;
  huge["M"] = 1024;
  CHECK_THROWS_WITH_AS(
      KernelArguments(k, {{"A", 0xa000}, {"C", 0xc000}}, huge, never),
      doctest::Contains("input buffer 'A' of shape [32768, 1024, 64] has 2147483648 elements, "
                        "past the 2147483647"),
      Error);
  // A kernel that addresses A with 64-bit offsets (Kernel::wide_offsets) takes it at any size.
  twist::Kernel addressed_in_64_bits = k;
  addressed_in_64_bits.wide_offsets = {"A"};
  CHECK_NOTHROW(check_offsets_fit(addressed_in_64_bits, huge));
  huge["B"] = 32767;  // the largest batch whose A fits: accepted
  CHECK_NOTHROW(check_offsets_fit(k, huge));
  Scalars wide = kScalars;
  wide["M"] = 3.0e9;
  wide["B"] = 0;
  CHECK_THROWS_WITH_AS(KernelArguments(k, {{"A", 0xa000}, {"C", 0xc000}}, wide, never),
                       doctest::Contains("scalar 'M' = 3000000000 does not fit"), Error);
}

TEST_CASE(
    "the printed signature takes tensor maps last, as __grid_constant__ CUtensorMap, and NVRTC accepts it") {
  const std::string source = cuda_source(tma_kernel());
  INFO(source);
  CHECK(source.find("struct alignas(128) CUtensorMap {") != std::string::npos);
  CHECK(source.find("float *__restrict__ C, const __half *__restrict__ A, int M, float alpha, const "
                    "__grid_constant__ CUtensorMap A_map, const __grid_constant__ CUtensorMap C_map)") !=
        std::string::npos);
  CHECK_NOTHROW(compile_to_cubin(source, "tma_kernel.cu", {.arch = "sm_90a"}));
  twist::Kernel plain = tma_kernel();
  plain.tensor_maps.clear();
  CHECK(cuda_source(plain).find("CUtensorMap") == std::string::npos);
}
