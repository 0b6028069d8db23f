#pragma once
// How the interpreter runs the divergent roles of a block, such as the producer and consumer warpgroups of a
// warp-specialized kernel: each warpgroup of either side of a divergent branch that holds a blocking
// statement runs as a group of threads of its own, and the groups take turns. A group runs its threads in
// lockstep until it finishes or blocks (an mbarrier wait on a phase that has not completed, a barrier that
// not every thread it counts has reached); then another group that can go on runs, the first one that can in
// the order the groups were made, so a run is deterministic. When every group is blocked the block would hang
// on a GPU; the interpreter reports the deadlock with what each group waits for.
//
// Each group other than the block's first runs on a thread of its own, but only one runs at a time: the
// others sleep until it is their turn, so the interpreter's state needs no locks.
#include <condition_variable>
#include <exception>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/reference/interpreter/memory.h"

namespace twist::reference::interpreter {

class ThreadGroups {
 public:
  // `where` and `thread` are the machine's location: each group finds them as it left them when it resumes.
  ThreadGroups(Where &where, int &thread);
  ~ThreadGroups();
  ThreadGroups(const ThreadGroups &) = delete;
  ThreadGroups &operator=(const ThreadGroups &) = delete;

  // Runs each of `branches` as a group of its own and returns once all have finished; the calling group
  // waits meanwhile. An error in any group stops every group, and is rethrown here.
  void run_concurrently(const std::vector<std::function<void()>> &branches);
  // Blocks the running group until `ready()` holds, letting the others run meanwhile. `waiting_for` says
  // what the group waits for, for the message when no group can go on.
  void wait_until(const std::function<bool()> &ready, const std::function<std::string()> &waiting_for);
  // Whether other groups than the running one are unfinished (they may complete what it waits for).
  bool concurrent() const { return groups_.size() > 1; }

 private:
  struct Group {
    std::function<bool()> ready;  // set while the group is blocked
    std::function<std::string()> waiting_for;
    int children = 0;  // unfinished groups it runs concurrently (it waits for them)
    Group *parent = nullptr;
    bool done = false;
    std::thread thread;
  };
  // Stops being `self`'s turn: hands it to the next group that can go on (failing with a deadlock when none
  // can) and sleeps until it comes back, unless `self` has finished.
  void pass_turn(Group *self, std::unique_lock<std::mutex> &lock);
  // The first group, in the order they were made, that can go on.
  Group *next_runnable();
  // What every blocked group waits for.
  std::string deadlock_message() const;
  void sleep_until_turn(Group *self, std::unique_lock<std::mutex> &lock);

  Where &where_;
  int &thread_;
  std::mutex mutex_;
  std::condition_variable turn_changed_;
  std::list<Group>
      groups_;  // the unfinished groups, in the order they were made; the block's first group first
  Group *running_ = nullptr;
  std::exception_ptr failure_;  // the first error of a group, with the location it happened at
  Where failure_where_ = nullptr;
  int failure_thread_ = -1;
};

}  // namespace twist::reference::interpreter
