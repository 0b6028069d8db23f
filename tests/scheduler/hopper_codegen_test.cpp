// The Hopper intrinsics printed as CUDA: the hand-written TMA + mbarrier + wgmma products of the
// interpreter's tests compile for sm_90a with NVRTC, and the source holds the instructions they stand for.
#include <doctest/doctest.h>

#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/cuda/runtime/kernel_cache.h"
#include "lang/evaluate.h"
#include "tests/reference/interpreter/hopper_kernels.h"

using namespace twist::reference::testing;

namespace {

std::string compiled_source(const HopperProduct &p) {
  const Kernel k = hopper_product_kernel(p);
  const std::string source = twist::cuda::cuda_source(k);
  const twist::cuda::CompileResult r =
      twist::cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"});
  CHECK_MESSAGE(!r.cubin.empty(), source);
  return source;
}

bool has(const std::string &source, const std::string &text) {
  return source.find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("TMA, mbarrier and wgmma kernels compile for sm_90a with the instructions they ask for") {
  const std::string ss = compiled_source({.n = 256});
  INFO(ss);
  for (const char *instruction :
       {"mbarrier.init.shared::cta.b64", "mbarrier.arrive.expect_tx.shared::cta.b64",
        "mbarrier.try_wait.parity.shared::cta.b64",
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
        "wgmma.fence.sync.aligned", "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16",
        "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 0",
        "const __grid_constant__ CUtensorMap A_map", "__align__(1024) unsigned char twist_smem[]"})
    CHECK_MESSAGE(has(ss, instruction), instruction);
  // B row-major is MN-major: transposed B (the last immediate), A K-major.
  CHECK(has(ss, "p, 1, 1, 0, 1;"));
  // 128-byte swizzle is mode 1; B's LBO is one 64-column box (8192 bytes).
  CHECK(has(ss, "8192, 1024, 1)"));

  const std::string rs =
      compiled_source({.n = 64, .b_k_major = true, .a_in_registers = true, .input = twist::bf16});
  INFO(rs);
  CHECK(has(rs, "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"));
  CHECK(has(rs, "{%32, %33, %34, %35}, %36, p, 1, 1, 0;"));  // register A, K-major B

  const std::string f16 = compiled_source({.n = 128, .accumulator = twist::f16});
  CHECK(has(f16, "wgmma.mma_async.sync.aligned.m64n128k16.f16.f16.f16"));
}

TEST_CASE("every register of a wgmma's accumulator array is pinned around its fences and waits") {
  // Two 64-row atoms' accumulators in one array, the wgmma writing the second (d_index = 32): the empty asm
  // statements that keep the compiler from moving accumulator accesses across wgmma.fence and wait_group
  // must cover registers 32 to 63 too, not only the first atom's.
  const std::string f32 = compiled_source({.n = 64, .accumulator_atoms = 2});
  INFO(f32);
  CHECK(has(f32, "twist_wgmma_m64n64k16_f32_f16_ss01(&d[32]"));
  CHECK(has(f32, "for (int r = 0; r < 64; ++r) asm volatile(\"\" : \"+f\"(d[r])::\"memory\");"));
  CHECK(!has(f32, "r < 32; ++r"));
  // f16 accumulators: two halves a register, so 2 x 64 / 2 halves are 32 registers.
  const std::string f16 = compiled_source({.n = 64, .accumulator = twist::f16, .accumulator_atoms = 2});
  INFO(f16);
  CHECK(has(f16,
            "for (int r = 0; r < 32; ++r) asm volatile(\"\" : \"+r\"(reinterpret_cast<unsigned *>(d)[r])"));
}

TEST_CASE("TMA stores, bulk groups, fence.proxy.async and setmaxnreg print as their PTX") {
  namespace intrinsic = twist::intrinsic;
  Kernel k = hopper_product_kernel({});
  const Expr t = tid();
  k.body =
      block({intrinsic::setmaxnreg(240, true), k.body, intrinsic::fence_proxy_async(), intrinsic::barrier(),
             if_then(t == 0, block({intrinsic::tma_copy({false, "A_map", "As_out", 0, {0, 0}, {}}),
                                    intrinsic::tma_store_commit(), intrinsic::tma_store_wait(0)})),
             intrinsic::setmaxnreg(40, false)});
  k.body = shared_array("As_out", twist::f16, 64 * 64, k.body);
  k.shared_bytes = twist::shared_arrays(k.body).bytes;
  const std::string source = twist::cuda::cuda_source(k);
  INFO(source);
  CHECK(!twist::cuda::default_kernel_cache().compile(source, "tma_store.cu", {"sm_90a"}).cubin.empty());
  for (const char *instruction :
       {"cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group", "cp.async.bulk.commit_group",
        "cp.async.bulk.wait_group.read 0", "fence.proxy.async.shared::cta",
        "setmaxnreg.inc.sync.aligned.u32 240", "setmaxnreg.dec.sync.aligned.u32 40"})
    CHECK_MESSAGE(has(source, instruction), instruction);
}
