#pragma once
// The schedule primitives: how a func's loops are split, ordered and bound to the GPU, which inputs are
// staged in shared memory and how they get there, how partial results accumulate, and which matrix atom
// reduces a tile. A schedule records directives; scheduler/loops.h and lower.h give them their meaning and
// check that they are legal.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lang/func.h"
#include "lang/input.h"

namespace twist {

// A loop variable named in a schedule: a func's Var or RVar, or a new variable that a split introduces.
class LoopVar {
 public:
  LoopVar(const Var &v) : name_(v.name()) {}             // NOLINT
  LoopVar(const RVar &v) : name_(v.name()) {}            // NOLINT
  LoopVar(const char *name) : name_(name) {}             // NOLINT
  LoopVar(std::string name) : name_(std::move(name)) {}  // NOLINT
  const std::string &name() const { return name_; }

 private:
  std::string name_;
};

// Where the iterations of a loop go.
enum class Binding {
  serial,    // a loop in each thread
  unrolled,  // a loop in each thread, fully unrolled (its extent must be a constant)
  block_x,   // one iteration per block of the grid, along x, y or z
  block_y,
  block_z,
  warp,       // one iteration per warp of the block
  thread,     // one iteration per thread (per lane, where warps are bound too)
  warpgroup,  // one iteration per warpgroup (4 warps, 128 threads: what a wgmma atom runs on)
};

// How a staged tile travels from global to shared memory.
enum class Transport {
  plain,     // loads into registers, stores to shared memory
  cp_async,  // cp.async (sm_80+): 16-byte asynchronous copies in a multi-stage ring
  tma,  // the Hopper tensor memory accelerator: one thread copies each tile (boxes of rows swizzled by the
        // widest pattern the row allows, 32 to 128 bytes), completing on the slot's mbarrier (sm_90; the
        // tile feeds a wgmma atom)
};

// Where a row kernel keeps a row that its passes read several times (a row of 16-byte runs, see
// scheduler/row_kernel.h and docs/pipelines.md, "Rows read again").
enum class RowForm {
  chosen,     // the row kernel's rule decides
  registers,  // loaded once into registers, each thread its runs; the passes and the epilogue read them
  reread,     // not kept: each pass and the epilogue read the row from global memory again, run by run (the
              // second and later reads served by L1 and L2), so a thread needs few registers
};

// How a staged tile is laid out in shared memory.
enum class SharedLayout {
  row_major,  // as in global memory
  padded,     // each row padded by 16 bytes, against bank conflicts
  swizzled,   // 16-byte chunks XOR-swizzled within 128-byte lines, against bank conflicts without padding
};

// The precision in which partial results accumulate inside a matrix atom.
struct Accumulation {
  enum class Kind { f32, f16, hybrid } kind = Kind::f32;
  int promote_every = 0;  // hybrid: f16 atoms whose partials are added into f32 registers every n k-steps
  static Accumulation fp32() { return {Kind::f32, 0}; }
  static Accumulation fp16() { return {Kind::f16, 0}; }
  static Accumulation hybrid(int n) { return {Kind::hybrid, n}; }
};
std::string to_string(const Accumulation &a);

// mma_m16n8k16: mma.sync by a warp, i 16 x j 8 x k 16, fragments loaded with ldmatrix. wgmma: the Hopper
// wgmma.mma_async by a warpgroup, i 64 x j N x k 16 with N the j loop's extent (8 to 256, a multiple of 8),
// both operands read from their TMA-staged tiles through matrix descriptors.
enum class MatrixAtom { mma_m16n8k16, wgmma };

// How the parts of a reduction split across blocks are combined.
enum class SplitCombine {
  kernel,  // partial states go to a workspace; a second kernel combines them with the monoid's combine
  atomic,  // atomic adds into the output (sum monoids in f32 or i32 only)
  // partial states go to a workspace; the last block of each output tile to finish (counted by a ticket
  // per tile) combines them with the monoid's combine, in the same kernel (scheduler/split_combine.h)
  last_block,
};

// Which output tiles of a persistent grid stream-K splits along k (FuncSchedule::stream_k).
enum class StreamKTiles {
  // The partial wave plus one full wave: every block gets at least a tile's k-tiles, a tile has at most two
  // parts; but every block then runs its k ranges at its own offsets, so neighbouring tiles share few
  // operand tiles in L2.
  tail_and_wave,
  // The partial wave alone, over every block: the full waves stay whole (their blocks move through k
  // together), and each tail tile has about blocks / tail parts, which its last part folds one by one.
  tail,
};

struct SplitDirective {
  std::string var, outer, inner;
  int factor;
};
struct FuseDirective {
  std::string inner, outer, fused;
};
struct ReorderDirective {
  std::vector<std::string> innermost_first;
};
struct StageDirective {
  std::string input;
  std::string at;  // the loop whose every iteration stages the input's footprint; empty: once per block
  Transport transport;
  int depth;  // pipeline stages (1: copy then compute)
  SharedLayout layout;
};
struct AtomDirective {
  MatrixAtom atom;
  std::string i, j, k;  // the loops the atom's 16 x 8 x 16 covers
};
struct ReductionSplit {
  std::string var;  // the reduction loop whose iterations are spread over `parts` blocks
  int parts;
  SplitCombine combine;
};
struct ComputeAt {
  std::string consumer;
  std::string at;
};
// A TMA + wgmma main loop split by role: one producer warpgroup, added after the warpgroups the schedule
// binds, only issues the TMA copies (one elected thread of it), and the bound warpgroups only consume them
// (wgmma and the epilogue). setmaxnreg gives the producer's registers to the consumers: the producer drops to
// `producer_registers` per thread and each consumer rises to `consumer_registers` (24 to 256, multiples of 8;
// together within the registers the block starts with).
//
// With `ping_pong`, the consumer warpgroups of a chained reduction (a producer contraction read through a
// relative form, attention being one) take turns on the tensor cores, each on its own rows: a warpgroup
// waits for its turn (bar.sync on its own named barrier) before its column products and passes the turn on
// (bar.arrive on the next warpgroup's) once it has issued the next tile's producer contraction, so that one
// warpgroup's element function and rescale (the softmax) run while the other's matrix products do
// (FlashAttention-3's ping-pong). It needs two or more consumer warpgroups.
//
// On a plain contraction (a GEMM's wgmma main loop) in a persistent grid, `ping_pong` gives each of two
// consumer warpgroups output tiles of its own: the loops bind one warpgroup to a tile, the block runs two,
// and they take the block's tiles in turn (CUTLASS's ping-pong kernel), their main loops alternating on two
// named barriers, so that one warpgroup's epilogue runs while the other's wgmmas do.
struct WarpSpecialization {
  int producer_registers = 40;
  int consumer_registers = 232;
  bool ping_pong = false;
};

// The schedule of one func.
// The order in which blocks take the values of the loops bound to them (FuncSchedule::raster,
// FuncSchedule::reverse). Blocks are launched in blockIdx order, so this order decides which blocks share L2
// and which ones run last.
struct BlockLaunchOrder {
  int raster_group = 1;
  std::vector<std::string> reversed;  // block loops whose values the blocks take last first
};

class FuncSchedule {
 public:
  explicit FuncSchedule(std::string func) : func_(std::move(func)) {}
  FuncSchedule(std::string func, const FuncSchedule &like) : FuncSchedule(like) { func_ = std::move(func); }

  FuncSchedule &split(const LoopVar &v, const LoopVar &outer, const LoopVar &inner, int factor);
  // Splits i and j and orders the loops io, jo, ii, ji from outermost to innermost (j is the contiguous
  // dimension of a row-major output, so its inner loop is innermost).
  FuncSchedule &tile(const LoopVar &i, const LoopVar &j, const LoopVar &io, const LoopVar &jo,
                     const LoopVar &ii, const LoopVar &ji, int i_factor, int j_factor);
  // Halide's convention: the first variable listed becomes the innermost loop.
  FuncSchedule &reorder(const std::vector<LoopVar> &innermost_first);
  FuncSchedule &fuse(const LoopVar &inner, const LoopVar &outer, const LoopVar &fused);
  FuncSchedule &bind(const LoopVar &v, Binding binding);
  FuncSchedule &unroll(const LoopVar &v) { return bind(v, Binding::unrolled); }
  FuncSchedule &split_reduction(const LoopVar &r, int parts, SplitCombine combine = SplitCombine::kernel);
  FuncSchedule &stage(const Input &input, const LoopVar &at, Transport transport, int depth = 1,
                      SharedLayout layout = SharedLayout::swizzled);
  FuncSchedule &accumulate(Accumulation accumulation);
  FuncSchedule &matrix_atom(MatrixAtom atom, const LoopVar &i, const LoopVar &j, const LoopVar &k);
  // Blocks take output tiles in groups of `group` rows of tiles, so that neighbouring blocks share inputs in
  // L2.
  FuncSchedule &raster(int group);
  // Blocks take the values of block loop `v` last first. Where the work of a block grows with v (under a
  // causal mask, the last query tiles see the most keys), the longest blocks start first and the short ones
  // fill the last wave (longest processing time first). Any order of a block loop is legal: its blocks are
  // independent.
  FuncSchedule &reverse(const LoopVar &v);
  // Splits a TMA + wgmma main loop into a producer warpgroup and the consumer warpgroups (see
  // WarpSpecialization).
  FuncSchedule &warp_specialize(WarpSpecialization registers = {});
  // A persistent grid: min(blocks, tiles) blocks (`blocks` the number of SMs), block b taking the output
  // tiles b, b + blocks, ... in the launch order, so that a warp-specialized producer loads the next tile's
  // operands while the consumers finish the last one's epilogue, and no tile waits for a block to start.
  FuncSchedule &persistent(int blocks);
  // Thread-block clusters of `blocks` CTAs (1 or 2) in a persistent warp-specialized wgmma kernel: a
  // cluster's CTAs take consecutive output tiles of the raster order (vertically adjacent, so the raster
  // group must be even), and each TMA stage whose tile is the same for both (B of a GEMM) is loaded half by
  // each CTA and multicast to both; a CTA releases a ring slot in both CTAs (see docs/hopper.md).
  FuncSchedule &cluster(int blocks);
  // Stream-K on a persistent grid (data-parallel waves, then stream-K): the blocks first run whole output
  // tiles in full waves, then the last tiles (`tiles` says which) are split along the outermost reduction
  // loop into equal ranges of k-tiles across the blocks, so that every block ends at the same time. Each
  // part's states go to a workspace; the last part of a tile to arrive (a ticket after a fence) folds the
  // others into its registers with the monoid's combine, in the order of their k ranges, and runs the
  // epilogue once on the whole tile (see scheduler/stream_k.h). Needs persistent() and warp_specialize();
  // refused with split_reduction or cluster.
  FuncSchedule &stream_k(bool on = true, StreamKTiles tiles = StreamKTiles::tail_and_wave);
  // How a tensor-core kernel's output tiles leave the block's write-back tile in shared memory:
  // Transport::plain, 16-byte stores of whole rows by the block's threads (the default), or Transport::tma,
  // one thread storing the tile with cp.async.bulk.tensor (sm_90, wgmma kernels): the threads write the tile,
  // then fence_proxy_async, a barrier, and the store, whose shared reads are waited for before the tile is
  // written again. Out-of-bounds rows and columns are clipped by the store. With `stmatrix`, a wgmma kernel's
  // warps write a 16-bit tile with stmatrix (four 8 x 8 matrices of their accumulators at once) rather than
  // one 2-byte store per element; off unless asked, as HopperTiling::stmatrix, since it measured no faster
  // (docs/hopper.md, "The epilogue through a TMA store").
  FuncSchedule &store_output(Transport transport, bool stmatrix = false);
  // With store_output(Transport::tma): the output tile leaves one TMA box (a column slice, e.g. 128 x 64 f16)
  // at a time through `buffers` box-sized shared buffers used in turn, so the epilogue takes buffers boxes of
  // shared memory rather than the whole tile (a 128 x 256 f16 tile: 32 KB with 2 rather than 64 KB), and a
  // box's store overlaps the writes of the next. 0 (the default): the whole tile, stored at once.
  FuncSchedule &store_output_sub_tiles(int buffers);
  // Computes the func once per iteration of `at`, a loop of `consumer`, inside the consumer's kernel (a
  // reduction read by a row of its consumer is folded there by the block's threads as a tree).
  FuncSchedule &compute_at(const Func &consumer, const LoopVar &at);
  // Computes the func as a stage of its own, before its consumers: its own kernel(s), its values in a device
  // buffer of the program (LoweredProgram::workspaces) over the extents its consumers read.
  FuncSchedule &compute_root();
  // Lets a reduction be reordered or split although the associativity checker could not accept its monoid.
  // The reason is recorded with the schedule and printed with it.
  FuncSchedule &assume_associative(const std::string &reason);
  FuncSchedule &min_blocks_per_sm(int blocks);
  // exp and exp2 of f32 values run on the approximate special-function unit (ex2.approx.ftz: a relative error
  // of a few units in the last place, subnormal results flushed to 0), as FlashAttention kernels do, and a
  // reduction's elements computed on a tile that needs no mask are taken to be finite (-ffinite-math-only):
  // their tests against infinities are dropped there.
  FuncSchedule &approximate_math(bool on = true);
  // A stage with reductions computed at its rows: where its row kernel keeps a row read several times, and
  // the threads of its block (a power of two from 32 to 1024; 0: the row kernel's rule picks them).
  FuncSchedule &row_form(RowForm form, int threads_per_row = 0);
  // A chained reduction on wgmma atoms (a producer contraction such as S = Q K^T read through a relative
  // form, attention being one) issues the next key tile's producer wgmmas into a second set of accumulator
  // registers before the current tile's element function and rescale, and waits for them after its column
  // products: the tensor cores run while the tile's softmax does (FlashAttention-3's intra-warpgroup
  // overlap). It costs the producer's accumulators twice over; lowering refuses it where they do not fit
  // the registers a thread may have.
  FuncSchedule &overlap_producer(bool on = true);
  // A chained reduction on wgmma atoms issues each key tile's column products (P V) after the next tile's
  // producer wgmmas and waits for them after that tile's element function: the tensor cores run the products
  // while the next tile's softmax does (FlashAttention-3's order within a warpgroup, one tile behind). Every
  // wgmma is waited for inside the key tile that issues it, and S needs one set of accumulators; P is held
  // across the tile boundary. Needs warp_specialize(); exclusive with overlap_producer. With ping-pong a
  // consumer warpgroup's turn issues a tile's producer wgmmas and the previous tile's products, and is passed
  // before their waits (FlashAttention-3's full order). The column component's rebase must be a factor of the
  // row alone (attention's 2^(m_old - m_new)), applied to the column accumulators once the previous tile's
  // products have landed.
  FuncSchedule &delay_column_products(bool on = true);

  const std::string &func() const { return func_; }
  // The loop transformations (splits, fuses, reorders) in the order they were given.
  struct Transform {
    std::optional<SplitDirective> split;
    std::optional<FuseDirective> fuse;
    std::optional<ReorderDirective> reorder;
  };
  const std::vector<Transform> &transforms() const { return transforms_; }
  const std::map<std::string, Binding> &bindings() const { return bindings_; }
  const std::vector<StageDirective> &stages() const { return stages_; }
  const Accumulation &accumulation() const { return accumulation_; }
  const std::optional<AtomDirective> &atom() const { return atom_; }
  const std::optional<ReductionSplit> &reduction_split() const { return reduction_split_; }
  const std::optional<ComputeAt> &compute_at() const { return compute_at_; }
  bool computed_root() const { return compute_root_; }
  const std::optional<std::string> &associativity_override() const { return override_; }
  int raster_group() const { return raster_group_; }
  BlockLaunchOrder block_launch_order() const { return {raster_group_, reversed_}; }
  const std::optional<WarpSpecialization> &warp_specialization() const { return warp_specialization_; }
  int persistent_blocks() const { return persistent_blocks_; }  // 0: one block per tile
  int cluster_blocks() const { return cluster_blocks_; }        // 1: no clusters
  bool stream_k_enabled() const { return stream_k_; }
  StreamKTiles stream_k_tiles() const { return stream_k_tiles_; }
  Transport output_transport() const { return output_transport_; }
  bool stmatrix_writes() const { return stmatrix_writes_; }
  int output_sub_tile_buffers() const { return output_sub_tile_buffers_; }
  int min_blocks() const { return min_blocks_; }
  bool approximate() const { return approximate_; }
  RowForm row_form_choice() const { return row_form_; }
  int row_threads() const { return row_threads_; }  // 0: the rule's
  bool overlaps_producer() const { return overlap_producer_; }
  bool delays_column_products() const { return delay_column_products_; }

  std::string to_string() const;
  // This schedule without its reorders: the loop order the splits alone give (to tell whether a reorder
  // changes the order in which a reduction visits its domain).
  FuncSchedule without_reorders() const;

 private:
  std::string func_;
  std::vector<Transform> transforms_;
  std::map<std::string, Binding> bindings_;
  std::vector<StageDirective> stages_;
  Accumulation accumulation_;
  std::optional<AtomDirective> atom_;
  std::optional<ReductionSplit> reduction_split_;
  std::optional<ComputeAt> compute_at_;
  bool compute_root_ = false;
  std::optional<std::string> override_;
  int raster_group_ = 1;
  std::vector<std::string> reversed_;
  std::optional<WarpSpecialization> warp_specialization_;
  int persistent_blocks_ = 0;
  int cluster_blocks_ = 1;
  bool stream_k_ = false;
  StreamKTiles stream_k_tiles_ = StreamKTiles::tail_and_wave;
  Transport output_transport_ = Transport::plain;
  bool stmatrix_writes_ = false;
  int output_sub_tile_buffers_ = 0;
  int min_blocks_ = 1;
  bool approximate_ = false;
  RowForm row_form_ = RowForm::chosen;
  int row_threads_ = 0;
  bool overlap_producer_ = false;
  bool delay_column_products_ = false;
};

// The schedules of a program's funcs.
class Schedule {
 public:
  FuncSchedule &operator[](const Func &f);
  const FuncSchedule *find(const std::string &func) const;
  // Schedules `f` with the directives of `like` (another func's schedule): one schedule serves every func
  // whose loops have the same names, e.g. a user's own contraction scheduled like the library's GEMM.
  FuncSchedule &set_like(const Func &f, const FuncSchedule &like);
  std::string to_string() const;

 private:
  std::map<std::string, FuncSchedule> funcs_;
};

// The loops of a contraction over (i, j) reduced over k, laid out for mma.m16n8k16 atoms: block tiles of
// block_m x block_n over the grid (io on block_y, jo on block_x), warp tiles of warp_m x warp_n over the
// block's warps (iw, jw), 16 x 8 x 16 atoms (ia, ja, ka) inside unrolled loops (imt, jnt, kt), and k in tiles
// of block_k (ko, the loop that stages and split_reduction name). The library's GEMM schedules and the
// default schedule of a contraction are this plus their stages.
FuncSchedule &tile_for_mma(FuncSchedule &s, const LoopVar &i, const LoopVar &j, const LoopVar &k, int block_m,
                           int block_n, int block_k, int warp_m, int warp_n);

const char *to_string(Binding b);
const char *to_string(Transport t);
const char *to_string(SharedLayout l);

}  // namespace twist
