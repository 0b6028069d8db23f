#pragma once
// The ids of the named barriers (bar.sync / bar.arrive) a kernel's threads use, allocated here and nowhere
// else. A named barrier completes when its count of threads has reached it, arrivals by bar.arrive included,
// whatever statement they came from: two protocols sharing an id would let one complete the other's barrier
// early. Id 0 is __syncthreads'.
#include "lang/error.h"

namespace twist::named_barriers {

// The consumer warpgroups of a warp-specialized kernel among themselves (the epilogue's write-back tile).
inline constexpr int kConsumers = 1;
// Ping-pong (WarpSpecialization::ping_pong): consumer warpgroup w takes its turns on kFirstTurn + w.
inline constexpr int kFirstTurn = 2;
// Ping-pong of a contraction's consumer warpgroups, each its own tiles ("teams"): their turns as above, and
// team t's epilogue (its own write-back tile) on kFirstTeamEpilogue + t.
inline constexpr int kPingPongTeams = 2;
inline constexpr int kFirstTeamEpilogue = kFirstTurn + kPingPongTeams;
// The hardware's barriers per block: ids 0 to 15.
inline constexpr int kCount = 16;

// The turn barrier of the last of `warpgroups` consumer warpgroups, checked against the hardware's ids.
inline int last_turn_barrier(int warpgroups) {
  const int last = kFirstTurn + warpgroups - 1;
  TWIST_CHECK(last < kCount, "ping-pong of {} warpgroups needs named barriers up to {}; there are {}",
              warpgroups, last, kCount);
  return last;
}

}  // namespace twist::named_barriers
