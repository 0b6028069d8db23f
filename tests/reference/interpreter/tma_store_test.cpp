// The epilogue's path out of a Hopper kernel on the interpreter: stmatrix against the PTX ISA's fragment
// layout (computed here by hand, and against the wgmma accumulator layout it is used with), and TMA stores
// of a swizzled shared tile, clipped at the tensor's edge, with the hazards the hardware does not forgive.
#include <doctest/doctest.h>

#include "backends/reference/interpreter/interpreter.h"
#include "scheduler/hopper_layouts.h"
#include "tests/error_capture.h"
#include "tests/reference/interpreter/kernel_builder.h"

using namespace twist::reference;
using namespace twist::reference::testing;
using twist::TensorMap;
namespace intrinsic = twist::intrinsic;
namespace hopper = twist::hopper;
using twist::testing::contains;
using twist::testing::error_of;

namespace {

constexpr int kLanes = 32;

// One warp: lane l holds r[i] = 8 l + i, stmatrix writes `matrices` 8 x 8 matrices into s (matrix m at
// elements 64 m.., rows of 8), and each lane copies 8 elements of s out (those of matrices not written are
// not looked at).
HostTensor stored_matrices(int matrices, bool transpose) {
  const Expr lane = tid(), i = i32_var("i");
  Stmt s = block({unrolled("i", 8, store("r", Halide::cast(f16, lane * 8 + i), i)),
                  intrinsic::matrix_move({intrinsic::MatrixMove::Direction::store, "r", 0, "s",
                                          (lane / 8) % matrices * 64 + lane % 8 * 8, matrices, transpose}),
                  intrinsic::barrier(),
                  unrolled("i", 8, store("out", load(f16, "s", lane * 8 + i), lane * 8 + i))});
  s = shared_array("s", f16, 4 * 64, register_array("r", f16, 8, s));
  Kernel k;
  k.name = "stmatrix";
  k.buffers = {buffer("out", f16, {4 * 64}, BufferArg::Role::output)};
  k.grid = {1, 1, 1};
  k.threads = kLanes;
  k.shared_bytes = twist::shared_arrays(s).bytes;
  k.body = s;
  std::map<std::string, HostTensor> buffers = {{"out", HostTensor(f16, {4 * 64})}};
  buffers.at("out").fill(-1);
  run_kernel(k, buffers, {});
  return buffers.at("out");
}

}  // namespace

TEST_CASE(
    "stmatrix puts each lane's pairs where the PTX ISA's m8n8 fragment layout says, x1, x2, x4, .trans") {
  for (const int matrices : {1, 2, 4})
    for (const bool transpose : {false, true}) {
      const HostTensor out = stored_matrices(matrices, transpose);
      int wrong = 0;
      for (int m = 0; m < matrices; ++m)
        for (int r = 0; r < 8; ++r)
          for (int c = 0; c < 8; ++c) {
            // Without transpose, row r holds lane 4r + c/2's pair (columns 2(l%4), 2(l%4)+1); transposed, the
            // pair of lane 4c + r/2 runs down column c.
            const int lane = transpose ? 4 * c + r / 2 : 4 * r + c / 2;
            const int element = 2 * m + (transpose ? r % 2 : c % 2);
            wrong += out.get_linear(m * 64 + r * 8 + c) != 8 * lane + element;
          }
      INFO(matrices << " matrices" << (transpose ? ", transposed" : ""));
      CHECK(wrong == 0);
    }
}

TEST_CASE("stmatrix.x4 of wgmma accumulator elements 8c..8c+7 writes the warp's 16 x 16 block in place") {
  // Warp w of a warpgroup holds accumulator rows 16w..16w+15; elements 8c..8c+7 of its lanes are columns
  // 16c..16c+15. Each lane tags its elements with their (row, col) and gives the row address the lowering
  // gives (scheduler/reduction_kernel.cpp, stmatrix_writes): row l % 8 + 8 ((l / 8) % 2), column 8 (l / 16).
  const int c = 1;
  const Expr lane = tid();
  std::vector<Stmt> tags;
  for (int k = 0; k < 8; ++k) {
    // accumulator_position(t, 8c + k) for warp 0, from the layout's formula (hopper_layouts.h).
    const Expr row = (lane % 32) / 4 + 8 * ((k % 4) / 2),
               col = 8 * ((8 * c + k) / 4) + (lane % 4) * 2 + k % 2;
    tags.push_back(store("r", Halide::cast(f16, row * 32 + col), k));
  }
  const Expr row = lane % 8 + 8 * ((lane / 8) % 2), col = 16 * c + 8 * (lane / 16);
  Stmt s = block(
      {block(tags),
       intrinsic::matrix_move({intrinsic::MatrixMove::Direction::store, "r", 0, "s", row * 32 + col}),
       intrinsic::barrier(),
       unrolled("i", 16, store("out", load(f16, "s", lane * 16 + i32_var("i")), lane * 16 + i32_var("i")))});
  s = shared_array("s", f16, 16 * 32, register_array("r", f16, 8, s));
  Kernel k;
  k.name = "stmatrix_accumulators";
  k.buffers = {buffer("out", f16, {16 * 32}, BufferArg::Role::output)};
  k.grid = {1, 1, 1};
  k.threads = kLanes;
  k.shared_bytes = twist::shared_arrays(s).bytes;
  k.body = s;
  std::map<std::string, HostTensor> buffers = {{"out", HostTensor(f16, {16 * 32})}};
  buffers.at("out").fill(-1);
  run_kernel(k, buffers, {});
  // The formula above is the layout's: check it against hopper::accumulator_position first.
  for (int t = 0; t < kLanes; ++t)
    for (int e = 0; e < 8; ++e) {
      const hopper::FragmentPosition p = hopper::accumulator_position(t, 8 * c + e);
      CHECK(p.row == t / 4 + 8 * ((e % 4) / 2));
      CHECK(p.col == 8 * ((8 * c + e) / 4) + (t % 4) * 2 + e % 2);
    }
  int wrong = 0;
  for (int r = 0; r < 16; ++r)
    for (int col = 16 * c; col < 16 * c + 16; ++col)
      wrong += buffers.at("out").get_linear(r * 32 + col) != r * 32 + col;
  CHECK(wrong == 0);
}

TEST_CASE("stmatrix rows must be 16-byte aligned") {
  const Expr lane = tid();
  Stmt s =
      intrinsic::matrix_move({intrinsic::MatrixMove::Direction::store, "r", 0, "s", lane % 8 * 8 + 4, 1});
  s = shared_array("s", f16, 128, register_array("r", f16, 2, s));
  Kernel k;
  k.name = "misaligned";
  k.grid = {1, 1, 1};
  k.threads = kLanes;
  k.shared_bytes = twist::shared_arrays(s).bytes;
  k.body = s;
  std::map<std::string, HostTensor> buffers;
  const std::string e = error_of([&] { run_kernel(k, buffers, {}); });
  INFO(e);
  CHECK(contains(e, "stmatrix row s[4] (matrix 0, row 0) is not 16-byte aligned"));
}

namespace {

constexpr int kThreads = 128, kRows = 8, kColumns = 64;  // the tile: 8 rows of 128 bytes, 128-byte swizzle

struct WriteBack {
  int rows = 5, columns = 40;  // the tensor: smaller than the tile, which the store clips
  int tiles = 1;               // tiles written one after the other through the same buffer
  // Deliberate mistakes.
  bool skip_fence = false;
  bool skip_barrier = false;
  bool skip_store_wait = false;
};

// Each thread writes 4 elements of tile u (value 512 u + 64 row + col, exact in f16) at their swizzled
// addresses, then fence, barrier, and thread 0 stores the tile to Y at rows 8u..; before the next tile is
// written, thread 0 waits for the store's reads and the block synchronizes.
Kernel write_back_kernel(const WriteBack &w) {
  const Expr t = tid(), u = i32_var("tile"), e = t * 4 + i32_var("i");
  const Expr row = e / kColumns, col = e % kColumns;
  const Expr byte = row * 128 + col * 2;
  const Expr swizzled = (byte ^ ((row % 8) * 16)) / 2;
  std::vector<Stmt> body;
  if (!w.skip_store_wait) body.push_back(if_then(t == 0, intrinsic::tma_store_wait(0)));
  body.push_back(intrinsic::barrier());
  body.push_back(unrolled("i", 4, store("tile", Halide::cast(f16, u * 512 + row * 64 + col), swizzled)));
  if (!w.skip_fence) body.push_back(intrinsic::fence_proxy_async());
  if (!w.skip_barrier) body.push_back(intrinsic::barrier());
  body.push_back(if_then(t == 0, block({intrinsic::tma_copy({false, "Y_map", "tile", 0, {u * kRows, 0}, {}}),
                                        intrinsic::tma_store_commit()})));
  Stmt s = block({serial("tile", 0, w.tiles, block(body)), if_then(t == 0, intrinsic::tma_store_wait(0))});
  s = shared_array("tile", f16, kRows * kColumns, s);
  Kernel k;
  k.name = "write_back";
  k.buffers = {buffer("Y", f16, {w.rows, w.columns}, BufferArg::Role::output)};
  k.tensor_maps = {{"Y_map", "Y", {w.rows, w.columns}, {kRows, kColumns}, TensorMap::Swizzle::b128}};
  k.grid = {1, 1, 1};
  k.threads = kThreads;
  k.shared_bytes = twist::shared_arrays(s).bytes;
  k.body = s;
  return k;
}

HostTensor run_write_back(const WriteBack &w) {
  std::map<std::string, HostTensor> buffers = {{"Y", HostTensor(f16, {w.rows, w.columns})}};
  buffers.at("Y").fill(-1);
  run_kernel(write_back_kernel(w), buffers, {});
  return buffers.at("Y");
}

}  // namespace

TEST_CASE("a TMA store writes a swizzled shared tile out, clipped at the tensor's edge, tile after tile") {
  for (const WriteBack w : {WriteBack{5, 40, 1}, WriteBack{8, 64, 1}, WriteBack{21, 48, 3}}) {
    const HostTensor y = run_write_back(w);
    int wrong = 0;
    for (int r = 0; r < w.rows; ++r)
      for (int c = 0; c < w.columns; ++c) wrong += y.get({r, c}) != (r / kRows) * 512 + (r % kRows) * 64 + c;
    INFO(w.rows, " x ", w.columns, " in ", w.tiles, " tile(s)");
    CHECK(wrong == 0);
  }
}

TEST_CASE("the interpreter refuses a TMA store's hazards: no fence, no barrier, a tile rewritten too early") {
  SUBCASE("no fence_proxy_async between the writes and the store") {
    const std::string e = error_of([] { run_write_back({.skip_fence = true}); });
    INFO(e);
    CHECK(contains(e, "has not passed a fence_proxy_async since"));
  }
  SUBCASE("no barrier between the other threads' writes and the store") {
    const std::string e = error_of([] { run_write_back({.skip_barrier = true}); });
    INFO(e);
    CHECK(contains(e, "another thread wrote"));
  }
  SUBCASE("the next tile written before the store has read the last") {
    const std::string e =
        error_of([] { run_write_back({.rows = 16, .columns = 64, .tiles = 2, .skip_store_wait = true}); });
    INFO(e);
    CHECK(contains(e, "while an asynchronous read of it (a wgmma or TMA store"));
  }
}
