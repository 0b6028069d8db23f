#pragma once
// The memories an interpreted kernel reads and writes: global buffers, a block's shared arrays and each
// thread's register arrays, all holding values already rounded to their element type.
#include <cstdint>
#include <string>
#include <vector>

#include "lang/evaluate.h"
#include "lang/types.h"

namespace twist::reference::interpreter {

// The text of the statement that made an access, kept for error messages (owned by the Machine).
using Where = const std::string*;

enum class Space { global, shared, registers };
const char* space_name(Space space);

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
  int copies_in_flight = 0;  // cp.async issued into it and not yet completed
  int copier = -1;           // the thread that issued the latest of them
  Where copied_at = nullptr;
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

  std::string describe() const;  // "A_smem (shared f16[4096])"
};

// What an unwritten element holds: NaN for floating-point types, the largest value of an integer type (an
// index made from it lands out of bounds, a sum with it is visibly wrong), true for bool. GPUs do not clear
// shared memory or registers, so reading what nobody wrote must not look like a plausible zero.
Real poison(const Type& t);

// Fills an array with poison and forgets its access history, as a fresh allocation.
void reset(Array& a, int threads, bool track_accesses);

}  // namespace twist::reference::interpreter
