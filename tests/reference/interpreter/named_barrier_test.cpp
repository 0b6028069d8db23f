// Named barriers with bar.arrive (intrinsic::named_barrier_arrive): warpgroups of one role take turns, each
// waiting (bar.sync) on its own barrier until the other arrives there, as ping-pong consumers do. The
// interpreter runs each warpgroup of a role as a group of its own, and reports the protocol's mistakes: a
// turn never passed (deadlock), a turn passed that nobody takes (an unbalanced barrier at the block's end),
// counts that disagree, and a barrier id that differs within a group of threads that run together.
#include <doctest/doctest.h>

#include "backends/reference/interpreter/interpreter.h"
#include "tests/error_capture.h"
#include "tests/reference/interpreter/kernel_builder.h"

using namespace twist::reference;
using namespace twist::reference::testing;
namespace intrinsic = twist::intrinsic;
using twist::testing::contains;
using twist::testing::error_of;

namespace {

constexpr int kWarpgroup = 128;

struct Turns {
  int turns = 4;  // turns of each of the two warpgroups
  // Deliberate mistakes.
  bool first_turn_given = true;     // warpgroup 1 lets warpgroup 0 go first
  bool last_turn_kept = true;       // warpgroup 1 does not pass its last turn, which nobody would take
  int sync_count = 2 * kWarpgroup;  // the count of the bar.sync (the bar.arrive's is 256)
  bool as_roles = true;             // the warpgroups in a role branch (beside an idle third warpgroup)
};

// Warpgroups 0 and 1 take `turns` turns each, alternately: warpgroup w waits on barrier 2 + w, its thread 0
// appends w to a log in shared memory, and the warpgroup arrives on the other's barrier. The log is copied
// out once every thread has passed a block-wide barrier.
Kernel turns_kernel(const Turns &c) {
  const Expr t = tid(), wg = t / kWarpgroup, turn = i32_var("turn");
  const int arrive_count = 2 * kWarpgroup;
  const Stmt pass = intrinsic::named_barrier_arrive(2 + (wg + 1) % 2, arrive_count);
  const Stmt append =
      block({store("log", wg, load(i32, "next", 0)), store("next", load(i32, "next", 0) + 1, 0)});
  const Stmt take_turns =
      serial("turn", 0, c.turns,
             block({intrinsic::named_barrier(2 + wg, c.sync_count), if_then(t % kWarpgroup == 0, append),
                    c.last_turn_kept ? if_then(wg == 0 || turn < c.turns - 1, pass) : pass}));
  const Stmt consumers = c.first_turn_given ? block({if_then(wg == 1, pass), take_turns}) : take_turns;
  const Stmt roles =
      c.as_roles ? if_then(t >= 2 * kWarpgroup, Halide::Internal::Evaluate::make(0), consumers) : consumers;
  Stmt s = block({if_then(t == 0, store("next", 0, 0)), intrinsic::barrier(), roles, intrinsic::barrier(),
                  if_then(t < 2 * c.turns, store("out", load(i32, "log", t), t))});
  s = shared_array("next", i32, 1, shared_array("log", i32, 2 * c.turns, s));
  Kernel k;
  k.name = "turns";
  k.buffers = {buffer("out", i32, {2 * c.turns}, BufferArg::Role::output)};
  k.grid = {1, 1, 1};
  k.threads = (c.as_roles ? 3 : 2) * kWarpgroup;
  k.shared_bytes = twist::shared_arrays(s).bytes;
  k.body = s;
  return k;
}

HostTensor run_turns(const Turns &c) {
  std::map<std::string, HostTensor> buffers = {{"out", HostTensor(i32, {2 * c.turns})}};
  run_kernel(turns_kernel(c), buffers, {});
  return buffers.at("out");
}

}  // namespace

TEST_CASE("warpgroups of one role take turns through bar.sync on their own barrier and bar.arrive") {
  for (int turns : {1, 2, 5}) {
    const HostTensor log = run_turns({.turns = turns});
    INFO(turns, " turns");
    for (int k = 0; k < 2 * turns; ++k) CHECK(log.get({k}) == k % 2);
  }
}

TEST_CASE("the interpreter reports ping-pong protocols that would hang or leave a barrier unbalanced") {
  SUBCASE("no warpgroup gives the first turn: both wait forever") {
    const std::string e = error_of([] { run_turns({.first_turn_given = false}); });
    INFO(e);
    CHECK(contains(e, "deadlock: every group of the block's threads is blocked"));
    CHECK(contains(e, "named barrier 2 reached by 128 threads (bar.sync by threads 0 to 127"));
    CHECK(contains(e, "named barrier 3 reached by 128 threads (bar.sync by threads 128 to 255"));
  }
  SUBCASE("a turn passed that no warpgroup takes") {
    const std::string e = error_of([] { run_turns({.last_turn_kept = false}); });
    INFO(e);
    CHECK(contains(e, "ends with 128 threads arrived at named barrier 2 (of its 256)"));
  }
  SUBCASE("bar.sync and bar.arrive give different counts") {
    const std::string e = error_of([] { run_turns({.sync_count = 3 * kWarpgroup}); });
    INFO(e);
    // Warpgroup 0 waits first (its group was made first), then warpgroup 1's bar.arrive disagrees.
    CHECK(contains(e,
                   "bar.arrive 2, 256 reached by threads 128 to 255 while 128 threads wait at or arrived "
                   "at it counting 384"));
  }
  SUBCASE("warpgroups in lockstep naming different barriers") {
    const std::string e = error_of([] { run_turns({.as_roles = false}); });
    INFO(e);
    CHECK(contains(e, "bar.sync reached by threads 0 and 128 with barrier ids 2 and 3"));
  }
}

namespace {

// Warpgroup 1 passes warpgroup 0 its last turn on barrier `turn_id` and goes on to the epilogue, while
// warpgroup 0 still waits for something else (barrier 3, which warpgroup 1 then arrives at) before taking
// that turn. Both then write a tile in shared memory between two bar.sync on the consumers' barrier
// (named_barriers::kConsumers, 1) and read it reversed, as the epilogue of a ping-pong kernel does.
HostTensor run_turn_then_epilogue(int turn_id) {
  const Expr t = tid(), wg = t / kWarpgroup;
  const int count = 2 * kWarpgroup;
  const Stmt epilogue =
      block({intrinsic::named_barrier(1, count), store("tile", t, t), intrinsic::named_barrier(1, count),
             store("out", load(i32, "tile", count - 1 - t), t)});
  const Stmt consumers =
      block({if_then(wg == 1,
                     block({intrinsic::named_barrier_arrive(turn_id, count),
                            intrinsic::named_barrier_arrive(3, count)}),
                     block({intrinsic::named_barrier(3, count), intrinsic::named_barrier(turn_id, count)})),
             epilogue});
  Stmt s = if_then(t >= count, Halide::Internal::Evaluate::make(0), consumers);
  s = shared_array("tile", i32, count, s);
  Kernel k;
  k.name = "turn_then_epilogue";
  k.buffers = {buffer("out", i32, {count}, BufferArg::Role::output)};
  k.grid = {1, 1, 1};
  k.threads = 3 * kWarpgroup;
  k.shared_bytes = twist::shared_arrays(s).bytes;
  k.body = s;
  std::map<std::string, HostTensor> buffers = {{"out", HostTensor(i32, {count})}};
  run_kernel(k, buffers, {});
  return buffers.at("out");
}

}  // namespace

TEST_CASE("a turn on the epilogue's barrier id completes the epilogue's bar.sync early: reported") {
  // Named barriers count arrivals per id across the block: on its own id the turn is taken as meant.
  const HostTensor out = run_turn_then_epilogue(2);
  for (int t = 0; t < 2 * kWarpgroup; ++t) CHECK(out.get({t}) == 2 * kWarpgroup - 1 - t);
  // On id 1 warpgroup 1's arrival and its own first bar.sync complete the epilogue's barrier without
  // warpgroup 0, whose turn then completes warpgroup 1's second: warpgroup 1 reads the tile before warpgroup
  // 0 has written it.
  const std::string e = error_of([] { run_turn_then_epilogue(1); });
  INFO(e);
  CHECK(contains(e, "named barrier 1 reached by 128 threads (bar.sync by threads 0 to 127, 128 waiting)"));
}
