// The interpreter's execution model for divergent roles (thread_groups.h): a producer warpgroup and a
// consumer warpgroup of one block run as groups that take turns at blocking waits, as a warp-specialized
// kernel needs, with the hazard checks kept and a deadlock reported with what each group waits for.
#include <doctest/doctest.h>

#include "backends/reference/interpreter/interpreter.h"
#include "tests/error_capture.h"
#include "tests/reference/interpreter/kernel_builder.h"

using namespace twist::reference;
using namespace twist::reference::testing;
using twist::TensorMap;
namespace intrinsic = twist::intrinsic;
using twist::testing::contains;
using twist::testing::error_of;

namespace {

constexpr int kWarpgroup = 128;
constexpr int kRows = 8, kColumns = 64;  // a tile: 8 rows of 128 bytes, the 128-byte swizzle's pattern
constexpr int kTileElements = kRows * kColumns;

struct Ring {
  int tiles = 5;  // tiles of X copied to Y through the ring
  int slots = 2;
  // Deliberate mistakes.
  bool producer_skips_release_wait = false;
  bool consumer_never_releases = false;
};

// Warpgroup 1's thread 128 copies tile t of X (TMA load) into slot t % slots once the consumers have
// released it (the empty barrier); warpgroup 0 waits for the tile (the full barrier), and its thread 0 copies
// the slot out to Y (TMA store), waits for that store's reads and releases the slot.
Kernel ring_kernel(const Ring &r) {
  const Expr t = tid(), tile = i32_var("tile");
  const Expr slot = tile % r.slots, use = tile / r.slots;
  auto full = [&](const Expr &s) { return intrinsic::MbarrierRef{"full", s}; };
  auto empty = [&](const Expr &s) { return intrinsic::MbarrierRef{"empty", s}; };
  std::vector<Stmt> produce;
  if (!r.producer_skips_release_wait)
    produce.push_back(if_then(tile >= r.slots, intrinsic::mbarrier_wait(empty(slot), (use + 1) % 2)));
  produce.push_back(intrinsic::mbarrier_arrive(full(slot), kTileElements * 2));
  produce.push_back(
      intrinsic::tma_copy({true, "X_map", "ring", slot * kTileElements, {tile * kRows, 0}, full(slot)}));
  const Stmt producer = block({intrinsic::setmaxnreg(40, false),
                               if_then(t == kWarpgroup, serial("tile", 0, r.tiles, block(produce)))});
  std::vector<Stmt> consume = {intrinsic::mbarrier_wait(full(slot), use % 2)};
  std::vector<Stmt> copy_out = {
      intrinsic::tma_copy({false, "Y_map", "ring", slot * kTileElements, {tile * kRows, 0}, {}}),
      intrinsic::tma_store_commit(), intrinsic::tma_store_wait(0)};
  if (!r.consumer_never_releases) copy_out.push_back(intrinsic::mbarrier_arrive(empty(slot)));
  consume.push_back(if_then(t == 0, block(copy_out)));
  const Stmt consumer = block({intrinsic::setmaxnreg(232, true), serial("tile", 0, r.tiles, block(consume))});
  Stmt s = block({if_then(t == 0, unrolled("s", r.slots,
                                           block({intrinsic::mbarrier_init(full(i32_var("s")), 1),
                                                  intrinsic::mbarrier_init(empty(i32_var("s")), 1)}))),
                  intrinsic::barrier(), if_then(t >= kWarpgroup, producer, consumer)});
  s = shared_array("full", Halide::UInt(64), r.slots, s);
  s = shared_array("empty", Halide::UInt(64), r.slots, s);
  s = shared_array("ring", f16, r.slots * kTileElements, s);
  Kernel k;
  k.name = "ring";
  const int rows = r.tiles * kRows;
  k.buffers = {buffer("X", f16, {rows, kColumns}, BufferArg::Role::input),
               buffer("Y", f16, {rows, kColumns}, BufferArg::Role::output)};
  k.tensor_maps = {{"X_map", "X", {rows, kColumns}, {kRows, kColumns}, TensorMap::Swizzle::b128},
                   {"Y_map", "Y", {rows, kColumns}, {kRows, kColumns}, TensorMap::Swizzle::b128}};
  k.grid = {1, 1, 1};
  k.threads = 2 * kWarpgroup;
  k.shared_bytes = twist::shared_arrays(s).bytes;
  k.body = s;
  return k;
}

std::map<std::string, HostTensor> run_ring(const Ring &r) {
  const int rows = r.tiles * kRows;
  HostTensor x(f16, {rows, kColumns}), y(f16, {rows, kColumns});
  for (int64_t i = 0; i < x.size(); ++i) x.set_linear(i, static_cast<double>(i % 1000) / 4);
  y.fill(-1);
  std::map<std::string, HostTensor> buffers = {{"X", x}, {"Y", y}};
  run_kernel(ring_kernel(r), buffers, {});
  return buffers;
}

}  // namespace

TEST_CASE("a producer and a consumer warpgroup take turns at their mbarrier waits around a ring of slots") {
  for (const Ring r : {Ring{5, 2}, Ring{4, 1}, Ring{7, 3}}) {
    const std::map<std::string, HostTensor> buffers = run_ring(r);
    const HostTensor &x = buffers.at("X"), &y = buffers.at("Y");
    INFO(r.tiles, " tiles through ", r.slots, " slot(s)");
    int64_t wrong = 0;
    for (int64_t i = 0; i < x.size(); ++i) wrong += x.get_linear(i) != y.get_linear(i);
    CHECK(wrong == 0);
  }
}

TEST_CASE("the interpreter keeps its hazard checks across roles and reports their deadlocks") {
  SUBCASE("a producer that refills a slot before its release") {
    const std::string e =
        error_of([] { run_ring({.tiles = 3, .slots = 1, .producer_skips_release_wait = true}); });
    INFO(e);
    CHECK(contains(e, "TMA load into ring["));
    CHECK(contains(e, "while a TMA load into it (issued by thread 128"));
  }
  SUBCASE("consumers that never release: every group blocked") {
    const std::string e =
        error_of([] { run_ring({.tiles = 3, .slots = 1, .consumer_never_releases = true}); });
    INFO(e);
    CHECK(contains(e, "deadlock: every group of the block's threads is blocked"));
    CHECK(contains(e, "thread 128 waits for the phase of parity 0 of mbarrier empty[0]"));
    CHECK(contains(e, "thread 0 waits for the phase of parity 1 of mbarrier full[0]"));
  }
}

namespace {

// The producer group writes s, then both groups meet at barrier 1 (`count` threads), then the consumers
// read it; before that the consumers alone meet at barrier 2 (128 threads).
Kernel meet_kernel(int count) {
  const Expr t = tid();
  const intrinsic::MbarrierRef started{"started", 0};
  const Stmt producer =
      block({intrinsic::mbarrier_wait(started, 0), store("s", Halide::cast(f32, t), t - kWarpgroup),
             intrinsic::named_barrier(1, count)});
  const Stmt consumer =
      block({if_then(t == 0, intrinsic::mbarrier_arrive(started)), intrinsic::named_barrier(2, kWarpgroup),
             intrinsic::named_barrier(1, count), store("out", load(f32, "s", kWarpgroup - 1 - t), t)});
  Stmt s = block({if_then(t == 0, intrinsic::mbarrier_init(started, 1)), intrinsic::barrier(),
                  if_then(t >= kWarpgroup, producer, consumer)});
  s = shared_array("started", Halide::UInt(64), 1, shared_array("s", f32, kWarpgroup, s));
  Kernel k;
  k.name = "meet";
  k.buffers = {buffer("out", f32, {kWarpgroup}, BufferArg::Role::output)};
  k.grid = {1, 1, 1};
  k.threads = 2 * kWarpgroup;
  k.shared_bytes = twist::shared_arrays(s).bytes;
  k.body = s;
  return k;
}

}  // namespace

TEST_CASE("named barriers synchronize the threads they count, across roles") {
  std::map<std::string, HostTensor> buffers = {{"out", HostTensor(f32, {kWarpgroup})}};
  run_kernel(meet_kernel(2 * kWarpgroup), buffers, {});
  for (int i = 0; i < kWarpgroup; ++i) CHECK(buffers.at("out").get({i}) == 2 * kWarpgroup - 1 - i);
  // A count that the threads reaching the barrier overshoot, or that they never make.
  std::string e = error_of([&] { run_kernel(meet_kernel(3 * kWarpgroup / 2), buffers, {}); });
  INFO(e);
  CHECK(contains(e, "named barrier 1 reached by 256 threads"));
  CHECK(contains(e, "but it waits for 192"));
  e = error_of([&] { run_kernel(meet_kernel(3 * kWarpgroup), buffers, {}); });
  CHECK(contains(e, "barrier 1 waits for 384 threads, but the block has 256"));
}
