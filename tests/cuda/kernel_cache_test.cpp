#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "backends/cuda/runtime/cubin_elf.h"
#include "backends/cuda/runtime/kernel_cache.h"
#include "lang/error.h"
#include "tests/cuda/test_kernels.h"

using namespace twist;
using namespace twist::cuda;

namespace {

// A fresh directory for one test, removed afterwards.
struct TemporaryDirectory {
  std::filesystem::path path;
  TemporaryDirectory() {
    static int made = 0;
    path = std::filesystem::temp_directory_path() / fmt::format("twist-cache-test-{}-{}", getpid(), made++);
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TemporaryDirectory() { std::filesystem::remove_all(path); }
};

// Sets an environment variable (or unsets it, for nullptr) for the rest of the scope.
struct ScopedVariable {
  std::string name;
  std::optional<std::string> saved;
  ScopedVariable(std::string variable, const char *value) : name(std::move(variable)) {
    if (const char *old = std::getenv(name.c_str())) saved = old;
    value ? setenv(name.c_str(), value, 1) : unsetenv(name.c_str());
  }
  ~ScopedVariable() { saved ? setenv(name.c_str(), saved->c_str(), 1) : unsetenv(name.c_str()); }
};

std::string read_bytes(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::filesystem::path &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::vector<std::string> files_in(const std::filesystem::path &dir) {
  std::vector<std::string> names;
  for (const auto &entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

bool same_stats(const CacheStats &a, const CacheStats &b) {
  return a.hits == b.hits && a.compiles == b.compiles && a.rejected == b.rejected;
}

const CompileOptions kSm90a = {.arch = "sm_90a"};

}  // namespace

TEST_CASE("a second compile of the same kernel is a verified hit with the same cubin, log and resources") {
  TemporaryDirectory dir;
  KernelCache cache(dir.path);
  CompileResult first = cache.compile(test_kernels::kScaleAdd, "scale_add.cu", kSm90a);
  CHECK(same_stats(cache.stats(), {.hits = 0, .compiles = 1, .rejected = 0}));
  CHECK(std::filesystem::exists(cache.entry_path(test_kernels::kScaleAdd, "scale_add.cu", kSm90a)));

  CompileResult second = cache.compile(test_kernels::kScaleAdd, "scale_add.cu", kSm90a);
  CHECK(same_stats(cache.stats(), {.hits = 1, .compiles = 1, .rejected = 0}));
  CHECK(second.cubin == first.cubin);
  CHECK(second.log == first.log);
  REQUIRE(second.resources.size() == 1);
  CHECK(second.resources[0].kernel == "scale_add");
  CHECK(second.resources[0].registers == first.resources[0].registers);

  // Another process (here: another cache object on the same directory) finds it too.
  KernelCache other(dir.path);
  CHECK(other.compile(test_kernels::kScaleAdd, "scale_add.cu", kSm90a).cubin == first.cubin);
  CHECK(same_stats(other.stats(), {.hits = 1, .compiles = 0, .rejected = 0}));
}

TEST_CASE("every part of the key selects its own entry") {
  TemporaryDirectory dir;
  KernelCache cache(dir.path);
  const std::string &source = test_kernels::kScaleAdd;
  std::vector<std::filesystem::path> paths = {
      cache.entry_path(source, "scale_add.cu", kSm90a),
      cache.entry_path(source, "scale_add.cu", {.arch = "sm_80"}),
      cache.entry_path(source, "scale_add.cu", {.arch = "sm_90a", .line_info = true}),
      cache.entry_path(source, "scale_add.cu", {.arch = "sm_90a", .extra = {"-DUNUSED=1"}}),
      cache.entry_path(source, "renamed.cu", kSm90a),
      cache.entry_path(source + "\n", "scale_add.cu", kSm90a),
  };
  std::sort(paths.begin(), paths.end());
  CHECK(std::adjacent_find(paths.begin(), paths.end()) == paths.end());

  cache.compile(source, "scale_add.cu", kSm90a);
  CHECK(read_cubin_info(cache.compile(source, "scale_add.cu", {.arch = "sm_80"}).cubin).sm == 80);
  CHECK(same_stats(cache.stats(), {.hits = 0, .compiles = 2, .rejected = 0}));
}

TEST_CASE("a corrupted, truncated or empty entry is rejected and recompiled, and then valid again") {
  TemporaryDirectory dir;
  KernelCache cache(dir.path);
  const std::string &source = test_kernels::kScaleAdd;
  std::vector<char> original = cache.compile(source, "scale_add.cu", kSm90a).cubin;
  std::filesystem::path entry = cache.entry_path(source, "scale_add.cu", kSm90a);
  std::string whole = read_bytes(entry);

  std::string flipped = whole;
  flipped[flipped.size() - original.size() / 2] ^= 0x01;  // a byte inside the cubin
  std::string truncated = whole.substr(0, whole.size() - 100);
  int64_t rounds = 0;
  for (const std::string &damaged : {flipped, truncated, std::string()}) {
    write_bytes(entry, damaged);
    CHECK(cache.compile(source, "scale_add.cu", kSm90a).cubin == original);
    ++rounds;
    CHECK(same_stats(cache.stats(), {.hits = rounds - 1, .compiles = 1 + rounds, .rejected = rounds}));
    // The entry was rewritten whole: the next compile is a hit.
    CHECK(cache.compile(source, "scale_add.cu", kSm90a).cubin == original);
    CHECK(cache.stats().hits == rounds);
  }
}

TEST_CASE("an entry for another key under the same file name is never returned") {
  TemporaryDirectory dir;
  KernelCache cache(dir.path);
  // What a hash collision would leave: the entry of kernel A where kernel B's entry belongs.
  cache.compile(test_kernels::kScaleAdd, "a.cu", kSm90a);
  std::filesystem::copy_file(cache.entry_path(test_kernels::kScaleAdd, "a.cu", kSm90a),
                             cache.entry_path(test_kernels::kWriteThrough, "b.cu", kSm90a));
  CompileResult b = cache.compile(test_kernels::kWriteThrough, "b.cu", kSm90a);
  CHECK(same_stats(cache.stats(), {.hits = 0, .compiles = 2, .rejected = 1}));
  REQUIRE(b.resources.size() == 1);
  CHECK(b.resources[0].kernel == "write_through");
  CHECK(read_cubin_info(b.cubin).has_section(".text.write_through"));
}

TEST_CASE("concurrent writers of one entry leave exactly one whole entry and no temporary files") {
  TemporaryDirectory dir;
  constexpr int kWriters = 4;
  std::vector<std::vector<char>> results(kWriters);
  std::vector<std::thread> writers;
  for (int i = 0; i < kWriters; ++i)
    writers.emplace_back([&, i] {
      KernelCache cache(dir.path);
      results[i] = cache.compile(test_kernels::kTensorCoreTile, "tile.cu", kSm90a).cubin;
    });
  for (std::thread &writer : writers) writer.join();
  for (int i = 1; i < kWriters; ++i) CHECK(results[i] == results[0]);
  KernelCache reader(dir.path);
  CHECK(files_in(dir.path) ==
        std::vector<std::string>{
            reader.entry_path(test_kernels::kTensorCoreTile, "tile.cu", kSm90a).filename()});
  CHECK(reader.compile(test_kernels::kTensorCoreTile, "tile.cu", kSm90a).cubin == results[0]);
  CHECK(reader.stats().hits == 1);
}

TEST_CASE("an unwritable cache directory is an error that says where and what to do") {
  TemporaryDirectory dir;
  write_bytes(dir.path / "a_file", "not a directory");
  KernelCache cache(dir.path / "a_file" / "cache");
  std::string error;
  try {
    cache.compile(test_kernels::kScaleAdd, "scale_add.cu", kSm90a);
  } catch (const Error &e) {
    error = e.what();
  }
  CHECK(error.find((dir.path / "a_file" / "cache").string()) != std::string::npos);
  CHECK(error.find("TWIST_CACHE_DIR") != std::string::npos);
}

TEST_CASE("the cache directory is TWIST_CACHE_DIR, else XDG_CACHE_HOME/twist, else HOME/.cache/twist") {
  ScopedVariable home("HOME", "/home/someone");
  {
    ScopedVariable twist_dir("TWIST_CACHE_DIR", "/tmp/kernels");
    ScopedVariable xdg("XDG_CACHE_HOME", "/var/cache/someone");
    CHECK(default_cache_directory() == "/tmp/kernels");
  }
  {
    ScopedVariable twist_dir("TWIST_CACHE_DIR", nullptr);
    ScopedVariable xdg("XDG_CACHE_HOME", "/var/cache/someone");
    CHECK(default_cache_directory() == "/var/cache/someone/twist");
  }
  {
    ScopedVariable twist_dir("TWIST_CACHE_DIR", "");
    ScopedVariable xdg("XDG_CACHE_HOME", nullptr);
    CHECK(default_cache_directory() == "/home/someone/.cache/twist");
    ScopedVariable no_home("HOME", nullptr);
    CHECK_THROWS_WITH_AS(default_cache_directory(), doctest::Contains("set TWIST_CACHE_DIR"), Error);
  }
}

TEST_CASE("cached_compile uses the default cache") {
  TemporaryDirectory dir;
  ScopedVariable twist_dir("TWIST_CACHE_DIR", dir.path.c_str());
  REQUIRE(default_kernel_cache().directory() == dir.path);  // the first use in this process picks it
  std::vector<char> first = cached_compile(test_kernels::kScaleAdd, "scale_add.cu", kSm90a);
  std::vector<char> second = cached_compile(test_kernels::kScaleAdd, "scale_add.cu", kSm90a);
  CHECK(second == first);
  CHECK(same_stats(default_kernel_cache().stats(), {.hits = 1, .compiles = 1, .rejected = 0}));
}
