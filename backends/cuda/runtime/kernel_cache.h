#pragma once
// An on-disk cache of compiled kernels, so that a test suite or a tuning sweep compiles each distinct
// kernel once per toolkit rather than once per process.
//
// An entry is named by an FNV-1a hash of everything that determines the cubin: the source, the program
// name, the exact NVRTC options (architecture, line info, include directory, extras) and the NVRTC
// version. The entry stores that whole key next to the cubin and a checksum, and is used only when all of
// it matches: a hash collision, a truncated write or a flipped byte makes it a miss that recompiles and
// rewrites the entry, never a wrong kernel. Entries are written to a temporary file and renamed into
// place, so concurrent processes see either no entry or a whole one. A KernelCache may be used from several
// threads at once.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/cuda/runtime/nvrtc_compiler.h"

namespace twist::cuda {

struct CacheStats {
  int64_t hits = 0;      // entries read back, verified and returned
  int64_t compiles = 0;  // NVRTC runs: entries that were missing or rejected
  int64_t rejected = 0;  // entries that were present but unreadable, corrupt or for another key
};

class KernelCache {
 public:
  // Uses (and creates when first writing) `directory`.
  explicit KernelCache(std::filesystem::path directory);

  // The kernel from the cache when a valid entry exists, else compile() and store the result. Throws
  // twist::Error when compilation fails or the entry cannot be written.
  CompileResult compile(const std::string &source, const std::string &name, const CompileOptions &options);

  // The file that holds (or would hold) the entry for this key.
  std::filesystem::path entry_path(const std::string &source, const std::string &name,
                                   const CompileOptions &options) const;

  const std::filesystem::path &directory() const { return directory_; }
  CacheStats stats() const;

 private:
  std::filesystem::path directory_;
  std::atomic<int64_t> hits_ = 0, compiles_ = 0, rejected_ = 0;
};

// $TWIST_CACHE_DIR, else $XDG_CACHE_HOME/twist, else $HOME/.cache/twist. Throws twist::Error when none of
// these variables is set.
std::filesystem::path default_cache_directory();

// The process's cache in default_cache_directory(), chosen when first used.
KernelCache &default_kernel_cache();

// default_kernel_cache().compile(...).cubin.
std::vector<char> cached_compile(const std::string &source, const std::string &name,
                                 const CompileOptions &options);

}  // namespace twist::cuda
