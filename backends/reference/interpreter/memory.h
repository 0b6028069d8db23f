#pragma once
// The memories an interpreted kernel reads and writes: global buffers, a block's shared arrays and each
// thread's register arrays, all holding values already rounded to their element type.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lang/evaluate.h"
#include "lang/types.h"

namespace twist::reference::interpreter {

// The text of the statement that made an access, kept for error messages (owned by the Machine).
using Where = const std::string *;

struct Array;

enum class Space { global, shared, registers };
const char *space_name(Space space);

// Who touched one shared element since the last barrier, and which asynchronous copies will still write
// it: what the race checks compare each new access with.
struct SharedAccess {
  int64_t write_epoch = -1;  // the barrier interval of the last write, -1 if never written
  int writer = -1;
  Where written_at = nullptr;
  int64_t read_epoch = -1;  // the barrier interval of the reads recorded below
  int reader = -1;
  Where read_at = nullptr;
  int other_reader = -1;  // a second thread that read it in that interval, if any
  Where other_read_at = nullptr;
  int copies_in_flight = 0;  // cp.async or TMA loads issued into it and not yet completed
  int copier = -1;           // the thread that issued the latest of them
  Where copied_at = nullptr;
  bool copied_by_tma = false;  // whether the latest of them is a TMA load (waited for on its mbarrier)
  // The writer's count of fence_proxy_async when it wrote (Machine::proxy_fences); -1 for a write by the
  // async proxy (a TMA load), which the async proxy sees without a fence.
  int64_t writer_fences = -1;
  int async_readers = 0;  // wgmma and TMA stores that read it and are not yet retired by their wait
  Where async_read_at = nullptr;
};

// Where a TMA load took a shared element from: the tensor map (its index in Kernel::tensor_maps) and the
// element's row (its outer coordinates, linearized) and column (its innermost coordinate) in the tensor. A
// wgmma reading a tile through its descriptor checks that it meets the tile the copy wrote.
struct TmaOrigin {
  int tensor_map = -1;  // -1: not written by a TMA load (or written since)
  int64_t row = 0, col = 0;
};

// An mbarrier's state (scheduler/intrinsics.h): `completed` phases have completed, and the current one waits
// for `pending` arrivals and `tx` transaction bytes. TMA loads whose bytes it counts land in shared memory
// when a thread's wait observes the phase they completed.
struct TmaLanding {
  Array *dst = nullptr;
  std::vector<int64_t> elements;
  std::vector<Real> values;
  std::vector<TmaOrigin> origins;
  int issuer = -1;
  Where issued_at = nullptr;
  int64_t phase = 0;  // the phase whose completion it belongs to
};
struct Mbarrier {
  int expected = 0;
  int pending = 0;
  int64_t tx = 0;
  int64_t completed = 0;
  std::vector<TmaLanding> in_flight;   // issued in the current phase
  std::vector<TmaLanding> unlanded;    // of completed phases, waiting for a wait
  std::map<int, int64_t> last_waited;  // by thread: the phase its last wait observed
  // The cluster barriers completed when it was initialized: a peer block may use it only after one more
  // (Cluster::completed), which orders the init before the use.
  int64_t cluster_syncs_at_init = 0;
};

struct Array {
  Array(std::string name, Type type, Space space, int64_t size, bool writable = true)
      : name(std::move(name)), type(type), space(space), size(size), writable(writable) {}

  std::string name;
  Type type;
  Space space;
  int64_t size;                        // elements (per thread, for register arrays)
  bool writable;                       // false for a kernel's input buffers
  std::vector<Real> values;            // register arrays: thread t's elements at [t * size, (t + 1) * size)
  std::vector<SharedAccess> accesses;  // shared arrays under race checks: one per element
  int64_t base_address = 0;            // shared arrays: the byte address of element 0 (see shared_arrays)
  std::vector<TmaOrigin> origins;      // shared arrays a TMA load wrote: one per element
  std::map<int64_t, Mbarrier> mbarriers;  // by element: the initialized mbarriers of a u64 shared array
  std::vector<int> wgmma_holds;  // register arrays a wgmma uses: wgmmas in flight per element, as values
  // Workspaces that one kernel both writes and reads (the parts of a split that its last block folds):
  // whether each element holds a value, so that a read of an element no block has written yet (a part whose
  // block has not run) is refused instead of folding the poison.
  std::vector<bool> written;

  std::string describe() const;  // "A_smem (shared f16[4096])"
};

// What an unwritten element holds: NaN for floating-point types, the largest value of an integer type (an
// index made from it lands out of bounds, a sum with it is visibly wrong), true for bool. GPUs do not clear
// shared memory or registers, so reading what nobody wrote must not look like a plausible zero.
Real poison(const Type &t);

// Fills an array with poison and forgets its access history, as a fresh allocation.
void reset(Array &a, int threads, bool track_accesses);

}  // namespace twist::reference::interpreter
