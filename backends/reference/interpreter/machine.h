#pragma once
// The state of one kernel being interpreted: the threads of the block now running (their variables, the
// asynchronous copies they have in flight), the arrays of every memory, and where execution is, so that an
// error can say which kernel, block, thread and statement it comes from.
#include <array>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/reference/interpreter/interpret_options.h"
#include "backends/reference/interpreter/memory.h"
#include "backends/reference/interpreter/thread_groups.h"
#include "lang/evaluate.h"
#include "scheduler/loop_nest.h"

namespace twist::reference::interpreter {

// The threads that execute a statement together, in ascending order: the block's active mask.
using ActiveThreads = std::vector<int>;
// A compiled statement: executes it for every active thread, in lockstep.
using Exec = std::function<void(const ActiveThreads &)>;

inline constexpr int kWarpSize = 32;

// One cp.async that has been issued and not completed: its source was read when it was issued, and the
// values land in `dst` when a wait completes its group.
struct PendingCopy {
  static constexpr int kMaxElements = 16;  // 16 bytes of 1-byte elements
  Array *dst = nullptr;
  int64_t dst_index = 0;
  int elements = 0;
  std::array<Real, kMaxElements> values{};
  Where issued_at = nullptr;
};

// A thread's asynchronous copies: those issued since its last commit, and the committed groups, oldest first.
struct AsyncCopies {
  std::vector<PendingCopy> uncommitted;
  std::deque<std::vector<PendingCopy>> committed;
};

// What an asynchronous operation (a wgmma, a TMA store) holds until the wait that retires it: a register
// element (index: thread * size + element) it writes or reads, or a shared element it reads.
struct AsyncHold {
  Array *array = nullptr;
  int64_t index = 0;
};
// A thread's holds: those of operations issued since its last commit, and the committed groups, oldest first.
struct HeldGroups {
  std::vector<AsyncHold> open;
  std::deque<std::vector<AsyncHold>> committed;
};

class Machine;

// The blocks of a thread-block cluster (Kernel::cluster), which run together: each block is a Machine of its
// own, by its rank in the cluster (x fastest), and a block reaches its peers' shared memory through them
// (TMA multicast, remote mbarrier arrivals). `arrived` threads wait at the cluster barrier, which has
// completed `completed` times.
struct Cluster {
  std::vector<Machine *> ctas;
  int arrived = 0;
  int64_t completed = 0;
};

class Machine {
 public:
  // A block of its own, or with `peer` a block of peer's cluster: the blocks of a cluster share their
  // position and the groups of threads that take turns running them.
  Machine(const Kernel &kernel, const InterpretOptions &options, const Machine *peer = nullptr);

  const Kernel &kernel;
  const InterpretOptions options;
  ExprCompiler compiler;
  const int threads;
  // Where the kernel's shared arrays live (shared_arrays), in the order their Allocates are compiled.
  const SharedArrays shared_layout;

  std::vector<Slots> slots;                                 // each thread's variables, by ExprCompiler slot
  std::vector<AsyncCopies> async;                           // each thread's copies in flight
  std::vector<HeldGroups> wgmma_groups, bulk_store_groups;  // each thread's wgmmas and TMA stores
  // Each thread's fence_proxy_async count: a TMA store may read a thread's write only after a later fence.
  std::vector<int64_t> proxy_fences;
  // Each thread's latest write to global memory not yet followed by a threadfence (null when none): an
  // arrival ticket taken while one is pending could tell another block to read it before it lands.
  std::vector<Where> unfenced_global_write;
  std::array<int64_t, 3> block{};  // the block now running
  // Where execution is, shared by the blocks of a cluster (only one group of threads runs at a time).
  struct Position {
    int thread = -1;
    Where where = nullptr;
  };
  std::shared_ptr<Position> position;
  int &thread = position->thread;  // the thread now executing; -1 for a step of the whole block or warp
  Where &where = position->where;  // the statement now executing (or being compiled)
  int64_t epoch = 0;               // barriers the block has passed: accesses in one epoch are unordered
  bool running = false;            // false while the kernel is being compiled
  // The divergent roles of the running blocks, as groups of threads that take turns (thread_groups.h): the
  // blocks of a cluster, and the roles within each block.
  std::shared_ptr<ThreadGroups> shared_groups;
  ThreadGroups &groups = *shared_groups;
  Cluster *cluster = nullptr;  // the block's cluster (of one block where the kernel has no clusters)
  int cluster_rank = 0;
  bool exited = false;  // the block has run to its end (a peer may no longer reach its shared memory)
  // The block of rank `rank` in the cluster (this one for its own rank); fails naming the cluster's size.
  Machine &cta(int64_t rank);
  // The shared array of that name, for a peer's access to it (the arrays of a cluster's blocks have the
  // same names and layout).
  Array &shared_array(const std::string &name);
  std::map<std::string, Array *> shared_by_name;
  // A barrier that part of the block has reached while other groups run: the threads arrived at it, and
  // how many times it has completed.
  struct BarrierState {
    int arrived = 0;
    int threads = 0;  // the count the arrived threads gave
    int64_t completed = 0;
  };
  std::map<int, BarrierState> barriers;  // by id; 0 is the block-wide barrier

  // Keeps a description of a statement for messages; the pointer stays valid as long as the machine.
  Where describe(std::string text);
  Array &add_array(Array array);

  // The element `index` of `a` as the current thread sees it, bounds-checked; `access` names the operation
  // for the message ("load", "store", "copy into").
  int64_t element(const Array &a, Real index, const char *access) const;
  Real read(Array &a, int64_t element);
  void write(Array &a, int64_t element, Real value);
  // The write of a completed asynchronous copy, made by the thread that issued it.
  void land_copy(const PendingCopy &copy, int issuer);
  // An asynchronous operation takes or gives back its hold on an element (see AsyncHold).
  void hold(HeldGroups &groups, Array &a, int64_t index);
  static void release(const AsyncHold &h);
  // Retires the committed groups of `groups` beyond the newest `pending`.
  static void retire(HeldGroups &groups, int pending);
  // The write of an element by a completed TMA load issued by `issuer` at `issued_at`.
  void land_tma(Array &a, int64_t element, Real value, const TmaOrigin &origin, int issuer, Where issued_at);
  // The checks an asynchronous copy makes when it is issued into a shared element: the write may land at
  // any moment until it is waited for.
  void begin_copy_into(Array &a, int64_t element, bool by_tma = false);

  // "kernel 'k', block (1, 0, 0), thread 5, at `stmt`": where execution is.
  std::string location() const;

 private:
  void check_read(Array &a, int64_t element);
  // `access` says what the access is, as in "write of" or "cp.async into".
  void check_write(Array &a, int64_t element, const char *access);
  [[noreturn]] void in_flight(const Array &a, int64_t element, const char *access) const;
  [[noreturn]] void held_register(const Array &a, int64_t element, const char *access) const;

  std::deque<std::string> texts_;
  std::deque<Array> arrays_;
};

}  // namespace twist::reference::interpreter
