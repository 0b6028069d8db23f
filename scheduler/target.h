#pragma once
// What the GPU a program is lowered for offers: the budgets that legality checks hold schedules to.
#include <string>

namespace twist {

struct Target {
  std::string arch;  // "sm_80" or "sm_90a"
  int max_threads_per_block = 1024;
  int max_shared_bytes_per_block = 0;  // with the opt-in attribute, as cuFuncSetAttribute allows
  int max_registers_per_thread = 255;
  int registers_per_sm = 65536;
  bool has_tma = false;
  bool has_wgmma = false;
  // Programmatic dependent launch (sm_90): a kernel launched with programmatic stream serialization may start
  // while the kernel before it in the stream runs its last blocks (see Kernel::dependent_launch).
  bool has_dependent_launch = false;
  int max_threads_per_sm = 2048;  // resident threads and blocks per SM (sm_80 and sm_90 alike)
  int max_blocks_per_sm = 32;

  static Target sm80() { return {"sm_80", 1024, 163 * 1024, 255, 65536, false, false, false}; }
  static Target sm90a() { return {"sm_90a", 1024, 227 * 1024, 255, 65536, true, true, true}; }
  // "sm_80" or "sm_90a"; throws for anything else, naming the supported targets.
  static Target named(const std::string &arch);
};

}  // namespace twist
