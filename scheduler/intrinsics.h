#pragma once
// The twist intrinsics of the loop-nest IR (see loop_nest.h). Each is an Evaluate of an Extern Call named
// "twist.<op>" whose arguments are listed below; the builders and the matchers here are the one definition
// the lowering, the CUDA printer and the reference interpreter share.
//
// Buffer operands are named by a StringImm: a kernel buffer (global), or the name of an enclosing
// Allocate (shared or registers). Indices are in elements of that buffer's type.
#include <Halide.h>

#include <optional>
#include <string>
#include <vector>

#include "scheduler/loop_nest.h"

namespace twist::intrinsic {

using Halide::Expr;
using Halide::Internal::Stmt;

// Every thread of the block waits here (__syncthreads).
Stmt barrier();
// bar.sync `id`, `threads`: the executing threads wait until `threads` threads (a multiple of 32) have
// reached barrier `id` (1 to 15; 0 is the block-wide barrier). Synchronizes a part of the block, such as
// the consumer warpgroups of a warp-specialized kernel, while the other threads do something else. `id` may
// be an expression of the thread index that is the same across each warp (one barrier per warpgroup).
Stmt named_barrier(const Expr &id, int threads);
// bar.arrive `id`, `threads`: the executing threads count towards barrier `id` without waiting for it, so
// that threads waiting there (bar.sync with the same count) go on once `threads` have arrived or synced.
// One group of threads signals another this way, as warpgroups in ping-pong pass each other their turn.
Stmt named_barrier_arrive(const Expr &id, int threads);
struct NamedBarrier {
  Expr id;
  int threads;
  bool arrive;  // bar.arrive: counts and goes on; otherwise bar.sync: counts and waits
};
std::optional<NamedBarrier> as_named_barrier(const Stmt &s);

// Copies `bytes` (4, 8 or 16) from src[src_index...] to dst[dst_index...]; only the first `src_bytes`
// (an expression, 0 <= src_bytes <= bytes) are read and the rest are zero-filled, which is how copies
// at a tensor's edge stay in bounds. `async` copies are cp.async: they complete only at a wait (below);
// synchronous copies complete at once. Both addresses must be aligned to `bytes`.
struct Copy {
  std::string dst;
  Expr dst_index;
  std::string src;
  Expr src_index;
  int bytes = 16;
  Expr src_bytes;
  bool async = false;
};
Stmt copy(const Copy &c);
std::optional<Copy> as_copy(const Stmt &s);

// Closes the group of asynchronous copies this thread issued since the last commit.
Stmt async_commit();
// Waits until at most `pending` of this thread's committed groups are still in flight.
Stmt async_wait(int pending);
std::optional<int> as_async_wait(const Stmt &s);

// {ld,st}matrix.sync.aligned.m8n8.x{matrices}{.trans}.shared.b16, by one warp: `matrices` 8 x 8 matrices of
// 16-bit elements from shared memory into registers (load, ldmatrix) or back (store, stmatrix). Lane l gives,
// in shared_index, the element index of one 8-element row (lanes 8m..8m+7 the rows of matrix m, each 16-byte
// aligned); registers[registers_index + 2m] and registers[registers_index + 2m + 1] of each lane are two
// elements of matrix m: without transpose row l/4, columns 2(l%4) and 2(l%4)+1; with transpose rows 2(l%4)
// and 2(l%4)+1 of column l/4. With the wgmma accumulator layout (hopper_layouts.h), a lane's elements
// 8c..8c+7 are the four 8 x 8 matrices of its warp's 16 rows and columns 16c..16c+15: (rows, columns) (0,
// 0), (8, 0), (0, 8), (8, 8).
struct MatrixMove {
  enum class Direction { load, store };
  Direction direction = Direction::load;
  std::string registers;
  Expr registers_index;
  std::string shared;
  Expr shared_index;
  int matrices = 4;
  bool transpose = false;
};
Stmt matrix_move(const MatrixMove &m);
std::optional<MatrixMove> as_matrix_move(const Stmt &s);

// mma.sync.aligned.m16n8k16.row.col, by one warp: D = A * B + C with A 16x16 and B 16x8 in f16 or bf16,
// C and D 16x8 in f32 or f16. Per lane (g = lane / 4, t = lane % 4), the fragments are register arrays:
//   A: 8 elements a[0..7] at (row, col) = (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1),
//                                          (g, 2t+8), (g, 2t+9), (g+8, 2t+8), (g+8, 2t+9)
//   B: 4 elements b[0..3] at (k, n) = (2t, g), (2t+1, g), (2t+8, g), (2t+9, g)
//   C, D: 4 elements c[0..3] at (row, col) = (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)
struct Mma {
  std::string d, a, b, c;
  Expr d_index, a_index, b_index, c_index;
};
Stmt mma(const Mma &m);
std::optional<Mma> as_mma(const Stmt &s);

// Within a warp: dst[dst_index] = the value of `value` in lane (lane ^ lane_mask).
struct ShuffleXor {
  std::string dst;
  Expr dst_index;
  Expr value;
  int lane_mask = 1;
};
Stmt shuffle_xor(const ShuffleXor &s);
std::optional<ShuffleXor> as_shuffle_xor(const Stmt &s);

// buffer[index] += value, atomically (f32 or i32 global buffers).
struct AtomicAdd {
  std::string buffer;
  Expr index;
  Expr value;
};
Stmt atomic_add(const AtomicAdd &a);
std::optional<AtomicAdd> as_atomic_add(const Stmt &s);

// __threadfence(): this thread's earlier writes to global memory are seen by every block before any of its
// later writes (atomics included) are. A block publishing results for another block to read fences them
// before it tells that block (by an arrival ticket, below); the reading block fences after its ticket too.
Stmt threadfence();
bool is_threadfence(const Stmt &s);

// dst[dst_index] = atomicAdd(&counter[counter_index], 1), by each executing thread: the number of arrivals
// at the i32 global counter before this one. The interpreter refuses a ticket taken while a thread of the
// block has global writes not yet fenced (threadfence).
struct ArrivalTicket {
  std::string counter;
  Expr counter_index;
  std::string dst;
  Expr dst_index;
};
Stmt arrival_ticket(const ArrivalTicket &t);
std::optional<ArrivalTicket> as_arrival_ticket(const Stmt &s);

// ---- The Hopper (sm_90) asynchronous datapath ----
// mbarriers are 64-bit objects, elements of a shared array of u64 (Halide::UInt(64)). A barrier's phase
// completes when its pending arrivals reach zero and every transaction byte it expects has arrived; it then
// starts the next phase with the arrival count it was initialized with.
struct MbarrierRef {
  std::string array;
  Expr index;
};
// By one thread: the barrier starts phase 0 expecting `arrivals` arrivals.
Stmt mbarrier_init(const MbarrierRef &b, int arrivals);
// Each executing thread arrives once; with `expect_tx_bytes` defined, it first adds that many bytes to the
// transaction count the phase waits for (mbarrier.arrive.expect_tx).
Stmt mbarrier_arrive(const MbarrierRef &b, Expr expect_tx_bytes = Expr());
// Waits (mbarrier.try_wait.parity in a loop) until the phase of parity `parity` (0 or 1) has completed: the
// barrier's current phase has the other parity. A thread passes the phases of a barrier in order, flipping
// its parity after each wait.
Stmt mbarrier_wait(const MbarrierRef &b, Expr parity);
// Each executing thread arrives once on the barrier at the same shared address in CTA `cta` of its cluster
// (its rank, 0 to the cluster's size - 1; its own included): mapa.shared::cluster, then
// mbarrier.arrive.shared::cluster. How a consumer releases a ring slot that a peer CTA
// multicasts into.
Stmt mbarrier_arrive_cluster(const MbarrierRef &b, Expr cta);
struct MbarrierOp {
  enum class Kind { init, arrive, wait } kind;
  MbarrierRef barrier;
  int arrivals = 0;      // init
  Expr expect_tx_bytes;  // arrive: undefined for a plain arrive
  Expr parity;           // wait
  Expr cta = Expr();     // arrive: the cluster rank of the barrier's CTA; undefined for the thread's own CTA
};
std::optional<MbarrierOp> as_mbarrier(const Stmt &s);

// A TMA tile copy (cp.async.bulk.tensor) between global memory, described by the kernel's tensor map
// `tensor_map` (Kernel::tensor_maps), and a dense box in shared memory starting at element `shared_index`
// of `shared`. `coordinates` are the box's first element in the tensor, one per tensor-map dimension,
// dimension 0 outermost (the PTX operand lists them innermost first). The box lands in shared memory laid
// out row-major and swizzled by the map's swizzle (hopper_layouts.h). A load fills out-of-bounds elements
// with zero and completes its bytes on the mbarrier `barrier` (issued by one thread); a store writes only
// the in-bounds elements and belongs to the issuing thread's bulk groups (tma_store_commit/wait).
//
// A load with `multicast` defined (a 16-bit CTA mask, bit r for cluster rank r) writes the box into every
// masked CTA of the cluster, at the same shared offset, and completes its bytes on each one's barrier at
// the same offset (.multicast::cluster): each CTA's barrier expects the bytes that land in it, whoever
// issued them.
struct TmaCopy {
  bool load = true;
  std::string tensor_map;
  std::string shared;
  Expr shared_index;
  std::vector<Expr> coordinates;
  MbarrierRef barrier;      // loads only
  Expr multicast = Expr();  // loads only: the CTA mask; undefined for a copy into the issuing CTA only
};
Stmt tma_copy(const TmaCopy &c);
std::optional<TmaCopy> as_tma_copy(const Stmt &s);
// cp.async.bulk.commit_group and cp.async.bulk.wait_group.read: the stores' groups, as async_commit/wait.
Stmt tma_store_commit();
Stmt tma_store_wait(int pending);
bool is_tma_store_commit(const Stmt &s);
std::optional<int> as_tma_store_wait(const Stmt &s);

// fence.proxy.async.shared::cta: this thread's writes to shared memory become visible to the asynchronous
// proxy (TMA stores and wgmma read shared memory through it).
Stmt fence_proxy_async();
bool is_fence_proxy_async(const Stmt &s);

// A wgmma operand in shared memory: the descriptor of the tile whose element 0 is shared[index] (see
// hopper_layouts.h for the fields and the layouts they describe).
struct WgmmaOperand {
  std::string array;
  Expr index;
  int leading_bytes = 0, stride_bytes = 0;
  TensorMap::Swizzle swizzle = TensorMap::Swizzle::none;
  bool mn_major = false;
};
// wgmma.mma_async.sync.aligned.m64n{n}k16, by a whole warpgroup (128 threads, the first a multiple of 128):
// D = A * B + (accumulate ? D : 0), A 64 x 16 and B 16 x n in f16 or bf16, D 64 x n in f32 (or f16 for f16
// inputs). D is the register array d[d_index ...] (n / 2 elements per thread, hopper::accumulator_position);
// A comes from shared memory (`a`) or from registers (`a_registers` at a_index, 8 elements per thread,
// hopper::register_a_position); B from shared memory. The instruction is asynchronous: its accumulators
// (and register A) must not be touched, nor the shared tiles it reads be overwritten, until a
// wgmma_wait retires its group; a wgmma_fence must separate register writes from the wgmma that reads them.
struct Wgmma {
  int n = 0;
  std::string d;
  Expr d_index;
  std::optional<WgmmaOperand> a;
  std::string a_registers;
  Expr a_index;
  WgmmaOperand b;
  Expr accumulate;  // i32 or bool: 0 overwrites D
};
Stmt wgmma(const Wgmma &w);
std::optional<Wgmma> as_wgmma(const Stmt &s);
// wgmma.fence, wgmma.commit_group and wgmma.wait_group, each by a whole warpgroup. A fence orders the
// register accesses before it with the wgmmas after it, a wait the retired wgmmas with the accesses after it;
// `accumulators` names the accumulator arrays it orders: those of the wgmmas after the fence, those whose
// groups the wait retires. The CUDA printer keeps their accesses on their side of the instruction, and must
// not name an array of a wgmma still in flight (ptxas then waits for it, serializing the wgmmas: C7517).
// Empty: every wgmma accumulator array of the kernel, where no wgmma stays in flight across it.
Stmt wgmma_fence(const std::vector<std::string> &accumulators = {});
Stmt wgmma_commit();
Stmt wgmma_wait(int pending, const std::vector<std::string> &accumulators = {});
bool is_wgmma_fence(const Stmt &s);
bool is_wgmma_commit(const Stmt &s);
std::optional<int> as_wgmma_wait(const Stmt &s);
// The accumulators a wgmma_fence or wgmma_wait names (empty: all of them).
std::vector<std::string> wgmma_ordered_accumulators(const Stmt &s);

// setmaxnreg.{inc,dec}.sync.aligned.u32 `registers`, by a whole warpgroup: a producer warpgroup gives
// registers back, consumers take them (24 to 256, a multiple of 8).
Stmt setmaxnreg(int registers, bool increase);
struct SetMaxNreg {
  int registers;
  bool increase;
};
std::optional<SetMaxNreg> as_setmaxnreg(const Stmt &s);

// barrier.cluster.arrive.release then barrier.cluster.wait.acquire, by every thread of the block: every
// thread of every CTA of the cluster waits here. Before the first multicast or remote arrive (so that no
// CTA's copy lands in a peer whose barriers are not initialized) and before a CTA exits (so that none
// exits while a peer may still write its shared memory or arrive on its barriers).
Stmt cluster_sync();
bool is_cluster_sync(const Stmt &s);
// fence.mbarrier_init.release.cluster: this thread's mbarrier_inits become visible to the cluster (before
// the cluster_sync that lets peers use them).
Stmt fence_mbarrier_init();
bool is_fence_mbarrier_init(const Stmt &s);

bool is_barrier(const Stmt &s);
bool is_async_commit(const Stmt &s);
// Whether s is any twist intrinsic (for printers that must handle all of them).
bool is_intrinsic(const Stmt &s);

// The thread and block index variables.
Expr thread_index();
Expr block_index(int dim);  // 0, 1, 2 for x, y, z
inline constexpr const char *kThreadIndex = "threadIdx.x";
inline constexpr const char *kBlockIndex[3] = {"blockIdx.x", "blockIdx.y", "blockIdx.z"};

}  // namespace twist::intrinsic
