// The Hopper intrinsics on the interpreter: the swizzle patterns, descriptor fields, canonical layouts and
// fragment layouts against values worked out by hand from the PTX ISA, then whole TMA + mbarrier + wgmma
// products against a plain C++ product, and the refusals of what the hardware does not forgive.
#include <doctest/doctest.h>

#include "backends/reference/interpreter/interpreter.h"
#include "lang/float_formats.h"
#include "tests/error_capture.h"
#include "tests/reference/interpreter/hopper_kernels.h"

using namespace twist::reference;
using namespace twist::reference::testing;
using twist::testing::contains;
using twist::testing::error_of;
namespace hopper = twist::hopper;
using Swizzle = hopper::Swizzle;

TEST_CASE("TMA swizzle patterns XOR the 16-byte chunk with the row within the 8-row pattern") {
  // 128 B: bits 4-6 ^= bits 7-9. Row 1 chunk 0 (0x80) -> chunk 1; row 3 chunk 5 (0x1d0) -> chunk 6; row 7
  // chunk 0 (0x380) -> chunk 7; the pattern repeats every 1024 bytes.
  CHECK(hopper::swizzled_address(0x80, Swizzle::b128) == 0x90);
  CHECK(hopper::swizzled_address(0x1d0, Swizzle::b128) == 0x1e0);
  CHECK(hopper::swizzled_address(0x380, Swizzle::b128) == 0x3f0);
  CHECK(hopper::swizzled_address(0x480, Swizzle::b128) == 0x490);
  CHECK(hopper::swizzled_address(0x1d6, Swizzle::b128) == 0x1e6);  // bytes within a chunk stay put
  // 64 B: bits 4-5 ^= bits 7-8. 0x90 (bits 7-8 = 1, chunk 1) -> chunk 0; 0x180 (3, chunk 0) -> chunk 3;
  // 0x200 has bits 7-8 clear.
  CHECK(hopper::swizzled_address(0x90, Swizzle::b64) == 0x80);
  CHECK(hopper::swizzled_address(0x180, Swizzle::b64) == 0x1b0);
  CHECK(hopper::swizzled_address(0x200, Swizzle::b64) == 0x200);
  // 32 B: bit 4 ^= bit 7.
  CHECK(hopper::swizzled_address(0x80, Swizzle::b32) == 0x90);
  CHECK(hopper::swizzled_address(0x100, Swizzle::b32) == 0x100);
  CHECK(hopper::swizzled_address(0x1234, Swizzle::none) == 0x1234);
  CHECK(hopper::swizzle_alignment(Swizzle::b128) == 1024);
  CHECK(hopper::swizzle_alignment(Swizzle::b32) == 256);
}

TEST_CASE("wgmma matrix descriptors put each field in the PTX ISA's bits") {
  const hopper::MatrixDescriptor d{0x1230, 16, 1024, Swizzle::b128};
  const uint64_t bits = hopper::encode(d);
  CHECK(bits == (0x123ull | 1ull << 16 | 64ull << 32 | 1ull << 62));
  CHECK(hopper::encode({0x400, 8192, 1024, Swizzle::b64}) ==
        (0x40ull | 512ull << 16 | 64ull << 32 | 2ull << 62));
  CHECK(hopper::encode({0, 0, 256, Swizzle::b32}) == (16ull << 32 | 3ull << 62));
  CHECK(hopper::encode({0x3fff0, 0, 0, Swizzle::none}) == 0x3fffull);
  const hopper::MatrixDescriptor back = hopper::decode(bits);
  CHECK(back.start_address == d.start_address);
  CHECK(back.leading_bytes == d.leading_bytes);
  CHECK(back.stride_bytes == d.stride_bytes);
  CHECK(back.swizzle == d.swizzle);
  CHECK(contains(error_of([] { hopper::encode({0x1238, 0, 0, Swizzle::none}); }), "not a multiple of 16"));
}

TEST_CASE("wgmma canonical layouts address the element the PTX ISA's tables give") {
  // K-major, 128 B: (9, 10) -> 128 * 1 + 1024 * 1 + 20 = 1172 = 0x494, row 1 of the pattern: chunk 1 -> 0.
  CHECK(hopper::element_address({0, 0, 1024, Swizzle::b128}, hopper::Major::k, 9, 10) == 1156);
  // The k-step of 16 elements moves the start by 32 bytes; the swizzle still uses the row's address bits.
  CHECK(hopper::element_address({32, 0, 1024, Swizzle::b128}, hopper::Major::k, 1, 0) ==
        hopper::swizzled_address(128 + 32, Swizzle::b128));
  // MN-major, 128 B: (n 70, k 9) -> 6 * 2 + 1 * LBO 8192 + 1 * 128 + 1 * SBO 1024 = 9356, row 1: chunk 0
  // -> 1.
  CHECK(hopper::element_address({0, 8192, 1024, Swizzle::b128}, hopper::Major::mn, 70, 9) == 9372);
  // No swizzle, K-major: 8 x 16-byte core matrices, K-adjacent ones LBO apart, M-adjacent ones SBO apart.
  CHECK(hopper::element_address({0, 128, 256, Swizzle::none}, hopper::Major::k, 9, 10) == 16 + 256 + 4 + 128);
  // No swizzle, MN-major: core matrices of 8 (m) x 8 (k); m-adjacent SBO apart, k-adjacent LBO apart.
  CHECK(hopper::element_address({0, 128, 256, Swizzle::none}, hopper::Major::mn, 9, 10) ==
        2 + 256 + 32 + 128);
}

TEST_CASE("wgmma fragment layouts: accumulators for N up to 256 and register A") {
  // Thread 37: warp 1, lane 5, so g = 1 and q = 1.
  const std::pair<int, int> expected[] = {{17, 2}, {17, 3}, {25, 2}, {25, 3}, {17, 10}, {17, 11}};
  for (int i = 0; i < 6; ++i) {
    CHECK(hopper::accumulator_position(37, i).row == expected[i].first);
    CHECK(hopper::accumulator_position(37, i).col == expected[i].second);
  }
  CHECK(hopper::accumulator_position(37, 127).row == 25);  // N = 256: the last n8 chunk, columns 248-255
  CHECK(hopper::accumulator_position(37, 127).col == 251);
  CHECK(hopper::accumulator_position(127, 127).row == 63);
  CHECK(hopper::accumulator_position(127, 127).col == 255);
  // Register A as mma.m16n8k16's A fragment, in the warp's 16 rows: a0..a7 at (g, 2q), (g, 2q+1), (g+8, 2q),
  // (g+8, 2q+1), (g, 2q+8), (g, 2q+9), (g+8, 2q+8), (g+8, 2q+9).
  const std::pair<int, int> a[] = {{17, 2},  {17, 3},  {25, 2},  {25, 3},
                                   {17, 10}, {17, 11}, {25, 10}, {25, 11}};
  for (int i = 0; i < 8; ++i) {
    CHECK(hopper::register_a_position(37, i).row == a[i].first);
    CHECK(hopper::register_a_position(37, i).col == a[i].second);
  }
  CHECK(hopper::is_wgmma_n(8));
  CHECK(hopper::is_wgmma_n(256));
  CHECK_FALSE(hopper::is_wgmma_n(260));
  CHECK_FALSE(hopper::is_wgmma_n(100));
}

namespace {

void check_product(const HopperProduct &p) {
  const HostTensor A = dyadic(p.input, {p.m, p.k}, 1);
  const HostTensor B =
      dyadic(p.input, p.b_k_major ? std::vector<int64_t>{p.n, p.k} : std::vector<int64_t>{p.k, p.n}, 2);
  const HostTensor D = run_program(program_of(p), {{"A", A}, {"B", B}}, {}).at("D");
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t c = 0; c < p.n; ++c) {
      // Each wgmma (16 k) rounds its D once: exact sums of these values, except for f16 accumulators.
      double d = 0;
      for (int64_t k0 = 0; k0 < p.k; k0 += 16) {
        long double sum = d;
        for (int64_t k = k0; k < k0 + 16; ++k)
          sum += static_cast<long double>(A.get({r, k})) * (p.b_k_major ? B.get({c, k}) : B.get({k, c}));
        d = twist::round_to_type(p.accumulator, static_cast<double>(sum));
      }
      INFO("D[" << r << ", " << c << "]");
      REQUIRE(D.get({r, c}) == d);
    }
  }
}

std::string error_running(const HopperProduct &p) {
  const HostTensor A = dyadic(p.input, {p.m, p.k}, 1);
  const HostTensor B = dyadic(p.input, {p.k, p.n}, 2);
  return error_of([&] { run_program(program_of(p), {{"A", A}, {"B", B}}, {}); });
}

}  // namespace

TEST_CASE("TMA loads with 128-byte swizzle feed wgmma through descriptors: N = 64 to 256, both B majors") {
  for (const int n : {64, 72, 128, 256}) {
    INFO("B row-major (MN-major), N = " << n);
    check_product({.m = 64, .n = n});
  }
  for (const int n : {8, 56, 256}) {
    INFO("B N x K (K-major), N = " << n);
    check_product({.m = 64, .n = n, .b_k_major = true});
  }
}

TEST_CASE("TMA boxes past the tensor's edge read zeros; bf16 inputs and f16 accumulators") {
  check_product({.m = 37, .n = 72});
  check_product({.m = 50, .n = 64, .input = bf16});
  check_product({.m = 64, .n = 128, .accumulator = f16});
}

TEST_CASE("a wgmma writes the atom of its accumulator array that d_index names") {
  check_product({.m = 64, .n = 64, .accumulator_atoms = 2});
  check_product({.m = 64, .n = 128, .accumulator = f16, .accumulator_atoms = 3});
}

TEST_CASE("wgmma with A in registers follows the register-A fragment layout") {
  check_product({.m = 64, .n = 64, .a_in_registers = true});
  check_product({.m = 45, .n = 136, .a_in_registers = true, .input = bf16});
}

TEST_CASE("the interpreter refuses what the Hopper datapath does not forgive") {
  SUBCASE("a descriptor whose swizzle is not the one the copy wrote") {
    for (const Swizzle s : {Swizzle::none, Swizzle::b64, Swizzle::b32}) {
      const std::string e = error_running({.a_descriptor_swizzle = s});
      INFO(e);
      CHECK(contains(e, "the descriptor does not describe the layout the copy wrote"));
    }
  }
  SUBCASE("a wgmma reading a stage before its barrier completed") {
    const std::string e = error_running({.skip_wait = true});
    INFO(e);
    CHECK(contains(e, "is in flight: wait on the stage's mbarrier before the wgmma"));
  }
  SUBCASE("a thread reading a stage before its barrier completed") {
    const std::string e = error_running({.read_before_wait = true});
    INFO(e);
    CHECK(contains(e, "while a TMA load into it (issued by thread 0 at `twist.tma_load(\"B_map\""));
    CHECK(contains(e, "missing mbarrier_wait on the barrier the load completes on"));
  }
  SUBCASE("a wait on a phase that nothing completes") {
    const std::string e = error_running({.skip_expect_tx = true});
    INFO(e);
    CHECK(contains(e, "which has not completed"));
    CHECK(contains(e, "-16384 transaction bytes"));
  }
  SUBCASE("an accumulator touched between the wgmma's issue and its wait") {
    const std::string e = error_running({.touch_accumulator = true});
    INFO(e);
    CHECK(contains(e, "read of d[0] by thread 0 while a wgmma that uses it is in flight"));
  }
  SUBCASE("a box row that the swizzle does not allow, a box over 256 elements") {
    LoweredProgram program = program_of({});
    program.kernels[0].tensor_maps[0].box = {64, 32};
    const HostTensor A = dyadic(f16, {64, 64}, 1), B = dyadic(f16, {64, 64}, 2);
    std::string e = error_of([&] { run_program(program, {{"A", A}, {"B", B}}, {}); });
    INFO(e);
    CHECK(contains(e,
                   "the 128-byte swizzle needs rows of exactly 128 bytes (make the box's innermost dimension "
                   "64 elements)"));
    program.kernels[0].tensor_maps[0].box = {512, 64};
    e = error_of([&] { run_program(program, {{"A", A}, {"B", B}}, {}); });
    CHECK(contains(e, "has a box dimension of 512 elements; TMA boxes have 1 to 256 elements"));
  }
  SUBCASE("a wait on the wrong phase") {
    const std::string e = error_running({.wait_twice = true});
    INFO(e);
    CHECK(contains(e, "observes phase 0 again"));
  }
}
