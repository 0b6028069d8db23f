#pragma once
// The state of one kernel being interpreted: the threads of the block now running (their variables, the
// asynchronous copies they have in flight), the arrays of every memory, and where execution is, so that an
// error can say which kernel, block, thread and statement it comes from.
#include <array>
#include <deque>
#include <functional>
#include <map>
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

class Machine {
 public:
  Machine(const Kernel &kernel, const InterpretOptions &options);

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
  int thread = -1;                 // the thread now executing; -1 for a step of the whole block or warp
  Where where = nullptr;           // the statement now executing (or being compiled)
  int64_t epoch = 0;               // barriers the block has passed: accesses in one epoch are unordered
  bool running = false;            // false while the kernel is being compiled
  // The divergent roles of the running block, as groups of threads that take turns (thread_groups.h).
  ThreadGroups groups{where, thread};
  // A barrier that part of the block has reached while other groups run: the threads arrived at it, and
  // how many times it has completed.
  struct BarrierState {
    int arrived = 0;
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
