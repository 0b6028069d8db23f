#pragma once
// GEMM as a twist program: C(i, j) = sum over k of A(i, k) * B(k, j), a (+, x) contraction over the sum
// monoid, with the product cast to the output type (and an optional fused epilogue) by a pure func. The
// schedules below are ordinary uses of the schedule primitives; nothing here is GEMM-specific lowering.
#include <optional>
#include <string>

#include "lang/twist.h"
#include "scheduler/schedule.h"

namespace twist::apps {

enum class Epilogue {
  none,       // out = C
  bias_relu,  // out = relu(alpha * C + bias(j))
  bias_gelu,  // out = gelu_tanh(alpha * C + bias(j))
  bias_silu,  // out = silu(alpha * C + bias(j))
};

struct GemmOptions {
  Type input = f16;   // f16 or bf16
  Type output = f16;  // the stored type
  Epilogue epilogue = Epilogue::none;
  bool batched = false;     // A[b, M, K] x B[b, K, N]
  std::string prefix = "";  // prepended to every name, so that several GEMMs can be alive at once
};

struct Gemm {
  GemmOptions options;
  SizeParam M, N, K, batch;
  Input A, B;
  std::optional<Input> bias;
  std::optional<Param<float>> alpha;
  RDom k;
  Func C;    // the f32 sum of products
  Func out;  // what is stored
};

Gemm make_gemm(const GemmOptions &options = {});

// GELU in its tanh approximation, as torch.nn.functional.gelu(approximate='tanh') (the bias_gelu epilogue,
// and the gate of gated MLPs such as Gemma's).
Expr gelu_tanh(const Expr &x);

// The tiling of a GEMM schedule, in the terms the primitives take.
struct GemmTiling {
  int block_m = 128, block_n = 128, block_k = 32;
  int warp_m = 64, warp_n = 64;  // each warp's tile; block_m / warp_m * block_n / warp_n warps per block
  int stages = 3;
  Transport transport = Transport::cp_async;
  SharedLayout layout = SharedLayout::swizzled;
  Accumulation accumulation = Accumulation::fp32();
  int split_k = 1;  // > 1: split_reduction across blocks
  SplitCombine split_combine = SplitCombine::kernel;
  int raster_group = 8;
  int min_blocks_per_sm = 1;  // blocks the compiler must fit on one SM (it caps registers accordingly)
  std::string name() const;
};

// Applying these schedules to a contraction of one's own: they name loops and inputs, not the Gemm struct's
// objects, so Schedule::set_like moves them onto any func whose loops have the same names:
//   pure variables "i" and "j" (and "b" when batched), the reduction variable g.k.x.name() ("k.x" for a
//   GEMM made without a prefix: an RDom named "k"), and inputs with the names of g.A and g.B (staging
//   directives name inputs). The func must still be a sum of products for the matrix atom to apply.
//   Gemm g = make_gemm();
//   Schedule s;
//   s.set_like(my_C, *schedule_tensor_core(g, GemmTiling{}).find(g.C.name()));
// A loop name that differs makes lowering stop with an error naming it and the func's loops.
//
// Tensor-core schedule: block tiles over the grid, warp tiles over warps, mma.m16n8k16 atoms in registers, A
// and B staged in shared memory by the tiling's transport.
Schedule schedule_tensor_core(const Gemm &g, const GemmTiling &t);

// The tiling of a Hopper (sm_90) schedule: TMA copies into a ring of `stages` slots, wgmma atoms of N =
// block_n by `warpgroups` warpgroups, each owning block_m / warpgroups rows (64 per atom). Warp-specialized,
// a producer warpgroup beside them issues the copies with `producer_registers` registers a thread, and the
// `warpgroups` consumers get the most registers the SM's register file leaves them (consumer_registers).
// The defaults are the fastest configuration measured on the H200 (2026-12-03, bench/export_hopper_suite.sh:
// 128x256x64, 3 stages, warp-specialized, persistent over its 132 SMs).
struct HopperTiling {
  int block_m = 128, block_n = 256, block_k = 64;
  int warpgroups = 2;
  int stages = 3;
  Accumulation accumulation = Accumulation::fp32();
  int raster_group = 8;
  int split_k = 1;  // > 1: split_reduction of the k-tiles across blocks, combined by a second kernel
  SplitCombine split_combine = SplitCombine::kernel;  // or by the last block of each tile (last_block)
  bool warp_specialized = true;
  int producer_registers = 40;
  // > 0: a persistent grid of at most that many blocks (the GPU's SMs). Warp-specialized tilings only:
  // without a producer warpgroup the grid is one block per tile.
  int persistent_blocks = 132;
  // > 1: thread-block clusters of that many blocks (2) on vertically adjacent tiles, B's tile loaded half by
  // each and multicast to both (FuncSchedule::cluster). Persistent tilings with an even raster group only.
  // 1 by default. Measured on the H200 (2026-12-03 18:52 UTC, bench/RESULTS.md): correct, but 0.6x of
  // the unclustered kernel, with the slot releases then fenced at cluster scope. Those releases now use the
  // CTA-scope default, which is not measured yet.
  int cluster = 1;
  // The output tile leaves through shared memory by a TMA store (FuncSchedule::store_output(Transport::tma));
  // false: 16-byte stores of whole rows by the consumers. Measured on the H200 (2026-12-03 16:46 UTC, one
  // run, bench/export_hopper_suite.sh's hopper_epilogue): a tie within the run's noise over 7 shapes, 0.963x
  // cuBLAS (geometric mean) with either, and 0.959x with stmatrix writes, which therefore stay off by
  // default.
  bool tma_store = true;
  // With tma_store, the consumers write 16-bit tiles with stmatrix; false: element stores.
  bool stmatrix = false;
  // With tma_store: the output tile leaves one TMA box at a time through this many box buffers
  // (FuncSchedule::store_output_sub_tiles), freeing shared memory for the ring; 0: the whole tile at once.
  int output_sub_tile_buffers = 0;
  // Ping-pong (WarpSpecialization::ping_pong): two consumer warpgroups, each computing whole block tiles of
  // its own (so `warpgroups` is 1: block_m x block_n is one warpgroup's tile), take a persistent block's
  // tiles in turn, one's epilogue running while the other's wgmmas do. Warp-specialized persistent tilings
  // only.
  bool ping_pong = false;
  // The warpgroups that compute: `warpgroups`, twice over in ping-pong.
  int consumer_warpgroups() const { return ping_pong ? 2 * warpgroups : warpgroups; }
  // Stream-K on the persistent grid (FuncSchedule::stream_k): the last tiles (`stream_k_tiles` says which)
  // split along k across the blocks, each tile's parts folded by its last to arrive. Persistent tilings
  // only; not with split_k.
  bool stream_k = false;
  StreamKTiles stream_k_tiles = StreamKTiles::tail_and_wave;
  int consumer_registers() const;
  std::string name() const;
};

// Hopper schedule: block tiles over the grid, each warpgroup's rows in wgmma.m64nNk16 atoms (N = block_n),
// A and B staged by TMA with the 128-byte swizzle (block_k = 64 f16 elements a row).
Schedule schedule_hopper(const Gemm &g, const HopperTiling &t);

// A CUDA-core schedule: each thread folds a 4x4 register tile; any monoid can take it (max-plus GEMMs do).
Schedule schedule_simt(const Gemm &g, int block = 64, int thread_tile = 4, int block_k = 16);

}  // namespace twist::apps
