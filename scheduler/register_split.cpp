#include "scheduler/register_split.h"

#include <algorithm>

#include "lang/error.h"

namespace twist {

void check_register_split(const std::string &func, const WarpSpecialization &split, int threads,
                          int consumer_threads, int blocks_per_sm, const Target &target) {
  const int producer_threads = threads - consumer_threads;
  const int at_launch =
      std::min(target.max_registers_per_thread, target.registers_per_sm / (threads * blocks_per_sm)) / 8 * 8;
  if (split.producer_registers > at_launch || split.consumer_registers < at_launch)
    fail(
        "schedule of '{}': a block of {} threads at {} block(s) per SM starts with {} registers a thread, so "
        "warp_specialize() must give the producer at most that and the consumers at least that, not {} and "
        "{}",
        func, threads, blocks_per_sm, at_launch, split.producer_registers, split.consumer_registers);
  const int demand =
      split.producer_registers * producer_threads + split.consumer_registers * consumer_threads;
  if (demand > at_launch * threads)
    fail(
        "schedule of '{}': warp_specialize() asks for {} registers a block ({} producer threads at {} and {} "
        "consumer threads at {}), but the block starts with {} ({} threads at {}) and setmaxnreg only moves "
        "them between its warpgroups; lower the consumers' registers to at most {}",
        func, demand, producer_threads, split.producer_registers, consumer_threads, split.consumer_registers,
        at_launch * threads, threads, at_launch,
        (at_launch * threads - split.producer_registers * producer_threads) / consumer_threads / 8 * 8);
}

}  // namespace twist
