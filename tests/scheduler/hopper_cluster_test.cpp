// The Hopper GEMM in 2-block clusters (FuncSchedule::cluster, HopperTiling::cluster): B's tile loaded half by
// each block and multicast to both, slots released in both blocks, cluster barriers at the start and the end.
// Run on the interpreter, whose blocks of a cluster run together with distributed shared memory, against the
// oracle at odd shapes (a cluster's second tile partly or wholly past the output's edge); the source checked
// for the cluster instructions and compiled for sm_90a; schedules that cannot lower refused with the reason;
// kernels with one of the protocol's steps removed refused by the interpreter.
#include <doctest/doctest.h>

#include "apps/gemm/gemm.h"
#include "backends/cuda/codegen/cuda_printer.h"
#include "backends/cuda/runtime/kernel_cache.h"
#include "backends/reference/interpreter/interpreter.h"
#include "scheduler/arguments.h"
#include "scheduler/intrinsics.h"
#include "scheduler/lower.h"
#include "tests/error_capture.h"
#include "tests/scheduler/gemm_support.h"
#include "tests/scheduler/lowering_support.h"

using namespace twist;
using namespace twist::apps;
using twist::testing::contains;
using twist::testing::error_of;
using twist::testing::gemm_sizes;
using twist::testing::lowered_error;
using twist::testing::random_inputs;

namespace {

// 128 x 128 tiles (B's tile two boxes, one a block), 2 slots, 4 persistent blocks in clusters of 2.
HopperTiling cluster_tiling() {
  HopperTiling t;
  t.block_m = 128, t.block_n = 128, t.stages = 2, t.persistent_blocks = 4, t.raster_group = 2;
  t.cluster = 2;
  return t;
}

// Rewrites each intrinsic statement of a kernel body that `edit` returns a replacement for.
struct EditIntrinsics : Halide::Internal::IRMutator {
  std::function<std::optional<Stmt>(const Stmt &)> edit;
  using IRMutator::visit;
  Stmt visit(const Halide::Internal::Evaluate *op) override {
    const Stmt s(op);
    if (std::optional<Stmt> replaced = edit(s)) return *replaced;
    return s;
  }
};

// The interpreter's error for the cluster GEMM whose kernel is edited by `edit` (empty if it runs).
std::string edited_kernel_error(const std::function<std::optional<Stmt>(const Stmt &)> &edit) {
  Gemm g = make_gemm({.input = f16, .output = f32});
  LoweredProgram p = lower(g.out, schedule_hopper(g, cluster_tiling()), Target::sm90a());
  EditIntrinsics editor;
  editor.edit = edit;
  p.kernels[0].body = editor.mutate(p.kernels[0].body);
  const auto scalars = gemm_sizes(g, 300, 200, 200);
  const auto inputs = random_inputs(g.out, scalars, 5);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto &[name, t] : inputs) shapes[name] = t.shape();
  return error_of([&] { reference::run_program(p, inputs, bind_arguments(p, shapes, scalars)); });
}

}  // namespace

TEST_CASE("clustered Hopper GEMM matches the oracle on odd shapes, f16 and bf16, with a tile past the edge") {
  for (const Type &type : {f16, bf16}) {
    Gemm g = make_gemm({.input = type, .output = f32});
    // 300 rows: 3 row tiles, rounded up to 4 so that clusters pair them, the 4th wholly past the edge; 8
    // tiles over 2 clusters, 4 k-tiles each (the last mostly past K) through 2 slots. 130 rows: the
    // cluster's second tile holds 2 rows. 8 x 8 x 8: one cluster, one tile inside the output.
    for (const auto &[m, n, k] : {std::array{300, 200, 200}, std::array{130, 72, 136}, std::array{8, 8, 8}}) {
      const auto scalars = gemm_sizes(g, m, n, k);
      INFO(type_name(type), " ", m, "x", n, "x", k);
      CHECK(lowered_error(g.out, schedule_hopper(g, cluster_tiling()), random_inputs(g.out, scalars, 21),
                          scalars) < 1e-5);
    }
  }
  {  // The outputs through a TMA store or stored directly; f16 outputs.
    Gemm g = make_gemm({.input = f16, .output = f16});
    HopperTiling t = cluster_tiling();
    const auto scalars = gemm_sizes(g, 200, 136, 72);
    const auto inputs = random_inputs(g.out, scalars, 22);
    for (const bool tma_store : {true, false}) {
      t.tma_store = tma_store;
      CHECK(lowered_error(g.out, schedule_hopper(g, t), inputs, scalars) < 2e-3);
    }
  }
  {  // Batched: 2 x 2 tiles a batch, paired within each batch.
    Gemm g = make_gemm({.input = f16, .output = f32, .batched = true, .prefix = "b"});
    auto scalars = gemm_sizes(g, 130, 200, 64);
    scalars[g.batch.name()] = 3;
    CHECK(lowered_error(g.out, schedule_hopper(g, cluster_tiling()), random_inputs(g.out, scalars, 23),
                        scalars) < 1e-5);
  }
  {  // 128 x 256 tiles: each block multicasts two of B's four boxes.
    Gemm g = make_gemm({.input = f16, .output = f32});
    HopperTiling t = cluster_tiling();
    t.block_n = 256;
    const auto scalars = gemm_sizes(g, 260, 264, 136);
    CHECK(lowered_error(g.out, schedule_hopper(g, t), random_inputs(g.out, scalars, 24), scalars) < 1e-5);
  }
}

TEST_CASE("the clustered Hopper GEMM's source: multicast copies, remote releases, cluster barriers") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling t;
  t.cluster = 2;
  const Kernel k = lower(g.out, schedule_hopper(g, t), Target::sm90a()).kernels[0];
  CHECK(k.cluster == std::array<int, 3>{2, 1, 1});
  const std::string source = cuda::cuda_source(k);
  INFO(source);
  for (const char *instruction :
       {"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster",
        "mapa.shared::cluster.u32", "mbarrier.arrive.shared::cluster.b64",
        "barrier.cluster.arrive.release.aligned", "barrier.cluster.wait.acquire.aligned",
        "fence.mbarrier_init.release.cluster",
        // The empty barriers count both blocks' two consumer warpgroups.
        "twist_mbarrier_init(tma_empty_address + (tma_slot * 8), 4)"})
    CHECK_MESSAGE(source.find(instruction) != std::string::npos, instruction);
  for (const std::string &instruction : k.required_instructions)
    CHECK_MESSAGE(source.find(instruction) != std::string::npos, instruction);
  CHECK(!cuda::default_kernel_cache().compile(source, k.name + ".cu", {"sm_90a"}).cubin.empty());
  // Without clusters none of it appears.
  const std::string plain =
      cuda::cuda_source(lower(g.out, schedule_hopper(g, HopperTiling{}), Target::sm90a()).kernels[0]);
  CHECK(plain.find("multicast") == std::string::npos);
  CHECK(plain.find("barrier.cluster") == std::string::npos);
}

TEST_CASE("clustered schedules that cannot lower are refused with the reason") {
  Gemm g = make_gemm({.input = f16, .output = f16});
  HopperTiling t = cluster_tiling();
  std::string e = error_of([&] {
    schedule_hopper(g, [&] {
      HopperTiling three = t;
      three.cluster = 3;
      return three;
    }());
  });
  CHECK(contains(e, "cluster(3): clusters of 1 or 2 blocks are lowered"));
  t.persistent_blocks = 0;
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "is lowered for persistent warp-specialized wgmma kernels"));
  t = cluster_tiling();
  t.persistent_blocks = 5;
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "the grid must be a whole number of clusters"));
  t = cluster_tiling();
  t.raster_group = 3;
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  CHECK(contains(e, "only when the raster group is a multiple of 2, not 3"));
  t = cluster_tiling();
  t.block_n = 64;  // B's tile is one box: no equal shares
  e = error_of([&] { lower(g.out, schedule_hopper(g, t), Target::sm90a()); });
  INFO(e);
  CHECK(contains(e, "the tile is 1 box(es) of 64 columns; make its columns a multiple of 128"));
}

TEST_CASE("the interpreter refuses a cluster kernel without one of the protocol's steps") {
  // The GEMM as lowered runs.
  CHECK(edited_kernel_error([](const Stmt &) { return std::nullopt; }).empty());
  // No cluster barrier before the copies: a block multicasts onto a peer's barriers with nothing ordering
  // their init before it.
  std::string e = edited_kernel_error([first = true](const Stmt &s) mutable -> std::optional<Stmt> {
    if (!intrinsic::is_cluster_sync(s) || !first) return std::nullopt;
    first = false;
    return intrinsic::barrier();
  });
  INFO(e);
  CHECK(contains(e, "block 0 multicasts onto tma.full[0] of cluster CTA 1 with no cluster_sync since"));
  // No cluster barrier at the end: a block exits while its peer still releases slots in it.
  int syncs = 0;
  e = edited_kernel_error([&syncs](const Stmt &s) -> std::optional<Stmt> {
    if (!intrinsic::is_cluster_sync(s) || syncs++ == 0) return std::nullopt;
    return Halide::Internal::Evaluate::make(0);
  });
  CHECK(contains(e, "which has exited"));
  // A consumer that releases its slot only in its own block: a producer multicasts into the peer's slot
  // before the peer's consumers have waited for (and read) the tile in it.
  e = edited_kernel_error([](const Stmt &s) -> std::optional<Stmt> {
    const std::optional<intrinsic::MbarrierOp> op = intrinsic::as_mbarrier(s);
    if (!op || !op->cta.defined()) return std::nullopt;
    return intrinsic::mbarrier_arrive_cluster(op->barrier, intrinsic::block_index(0) % 2);
  });
  CHECK(contains(e, "TMA load into B_smem[4096] by thread 256 while a TMA load into it"));
  // A multicast mask naming a block outside the cluster of 2.
  e = edited_kernel_error([](const Stmt &s) -> std::optional<Stmt> {
    std::optional<intrinsic::TmaCopy> copy = intrinsic::as_tma_copy(s);
    if (!copy || !copy->multicast.defined()) return std::nullopt;
    copy->multicast = 5;
    return intrinsic::tma_copy(*copy);
  });
  CHECK(contains(e, "the block reaches the shared memory of cluster CTA 2, but its cluster has 2 block(s)"));
}
