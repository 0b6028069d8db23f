#include "backends/reference/interpreter/thread_groups.h"

#include "lang/error.h"

namespace twist::reference::interpreter {

namespace {

// Unwinds a group that another group's error has stopped; the error itself is rethrown by the block's first
// group.
struct Stopped {};

}  // namespace

ThreadGroups::ThreadGroups(Where &where, int &thread) : where_(where), thread_(thread) {
  running_ = &groups_.emplace_back();
}

ThreadGroups::~ThreadGroups() = default;

void ThreadGroups::run_concurrently(const std::vector<std::function<void()>> &branches) {
  std::unique_lock<std::mutex> lock(mutex_);
  Group *parent = running_;
  std::vector<Group *> children;
  for (const std::function<void()> &branch : branches) {
    Group *child = &groups_.emplace_back();
    child->parent = parent;
    ++parent->children;
    children.push_back(child);
    child->thread = std::thread([this, child, &branch] {
      std::unique_lock<std::mutex> turn(mutex_);
      sleep_until_turn(child, turn);
      turn.unlock();
      if (!failure_) {
        try {
          branch();
        } catch (const Stopped &) {
        } catch (...) {
          failure_ = std::current_exception();
          failure_where_ = where_;
          failure_thread_ = thread_;
        }
      }
      turn.lock();
      child->done = true;
      --child->parent->children;
      pass_turn(child, turn);
    });
  }
  const Where where = where_;
  const int thread = thread_;
  parent->ready = [parent] { return parent->children == 0; };
  pass_turn(parent, lock);
  parent->ready = nullptr;
  lock.unlock();
  for (Group *child : children) child->thread.join();
  groups_.remove_if([&](const Group &g) { return g.parent == parent; });
  where_ = where;
  thread_ = thread;
  if (!failure_) return;
  if (parent != &groups_.front()) throw Stopped{};
  // The block's first group reports the error where it happened.
  std::exception_ptr failure = failure_;
  failure_ = nullptr;
  where_ = failure_where_;
  thread_ = failure_thread_;
  std::rethrow_exception(failure);
}

void ThreadGroups::wait_until(const std::function<bool()> &ready,
                              const std::function<std::string()> &waiting_for) {
  if (ready()) return;
  std::unique_lock<std::mutex> lock(mutex_);
  Group *self = running_;
  self->ready = ready;
  self->waiting_for = waiting_for;
  const Where where = where_;
  const int thread = thread_;
  pass_turn(self, lock);
  self->ready = nullptr;
  self->waiting_for = nullptr;
  where_ = where;
  thread_ = thread;
  if (failure_) throw Stopped{};
}

ThreadGroups::Group *ThreadGroups::next_runnable() {
  for (Group &g : groups_) {
    if (g.done || g.children > 0) continue;
    // A stopped run wakes every blocked group, so that it unwinds.
    if (failure_ || !g.ready || g.ready()) return &g;
  }
  return nullptr;
}

void ThreadGroups::pass_turn(Group *self, std::unique_lock<std::mutex> &lock) {
  Group *next = next_runnable();
  if (!next) {
    const std::string message = deadlock_message();
    if (!self->done) {
      self->ready = nullptr;
      self->waiting_for = nullptr;
      fail("{}", message);
    }
    // The last group that could go on has finished: the deadlock is the error of the run, and the blocked
    // groups unwind.
    try {
      fail("{}", message);
    } catch (...) {
      failure_ = std::current_exception();
      failure_where_ = where_;
      failure_thread_ = thread_;
    }
    next = next_runnable();
  }
  if (next == self) return;
  running_ = next;
  turn_changed_.notify_all();
  if (!self->done) sleep_until_turn(self, lock);
}

void ThreadGroups::sleep_until_turn(Group *self, std::unique_lock<std::mutex> &lock) {
  turn_changed_.wait(lock, [&] { return running_ == self; });
}

std::string ThreadGroups::deadlock_message() const {
  std::vector<std::string> waits;
  for (const Group &g : groups_)
    if (!g.done && g.children == 0 && g.waiting_for) waits.push_back(g.waiting_for());
  if (waits.size() == 1) return waits[0];
  std::string list;
  for (const std::string &w : waits) list += "\n  " + w;
  return fmt::format(
      "deadlock: every group of the block's threads is blocked, so the block would hang on a GPU; they wait "
      "as follows:{}",
      list);
}

}  // namespace twist::reference::interpreter
