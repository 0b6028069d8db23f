#include "backends/cuda/runtime/kernel_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "backends/cuda/runtime/content_hash.h"
#include "backends/cuda/runtime/cubin_elf.h"
#include "lang/error.h"

namespace twist::cuda {

namespace {

// An entry is one header line followed by five sections, back to back:
//   twist-kernel-cache 1 nvrtc=13.0 sizes=<name>,<options>,<source>,<log>,<cubin> fnv1a=<hash of sections>
//   <name><options, one per line><source><log><cubin>
// The first three sections are the key; the header's sizes and checksum catch truncation and corruption.
constexpr std::string_view kMagic = "twist-kernel-cache";
constexpr int kFormatVersion = 1;

struct Key {
  std::string nvrtc;
  std::string name;
  std::string options;
  const std::string &source;
  int sm;
};

Key key_of(const std::string &source, const std::string &name, const CompileOptions &options) {
  std::string joined;
  for (const std::string &option : nvrtc_options(options)) joined += option + "\n";
  return {nvrtc_version(), name, std::move(joined), source, sm_number(options.arch)};
}

uint64_t hash_of(const Key &key) {
  uint64_t hash = fnv1a64(fmt::format("{} {}", kMagic, kFormatVersion));
  // Each part is length-prefixed, so that moving bytes from one part to the next changes the hash.
  for (std::string_view part : {std::string_view(key.nvrtc), std::string_view(key.name),
                                std::string_view(key.options), std::string_view(key.source)})
    hash = fnv1a64(part, fnv1a64(fmt::format("{}:", part.size()), hash));
  return hash;
}

std::string encode(const Key &key, const CompileResult &result) {
  std::string_view cubin(result.cubin.data(), result.cubin.size());
  std::string body = key.name + key.options + key.source + result.log;
  body.append(cubin);
  return fmt::format("{} {} nvrtc={} sizes={},{},{},{},{} fnv1a={:016x}\n", kMagic, kFormatVersion, key.nvrtc,
                     key.name.size(), key.options.size(), key.source.size(), result.log.size(), cubin.size(),
                     fnv1a64(body)) +
         body;
}

// The cached result when `entry` is whole and for exactly `key`; nullopt for anything else.
std::optional<CompileResult> decode(const std::string &entry, const Key &key) {
  size_t header_end = entry.find('\n');
  if (header_end == std::string::npos) return std::nullopt;
  std::istringstream header(entry.substr(0, header_end));
  std::string magic, nvrtc, sizes_text, checksum_text;
  int version = 0;
  if (!(header >> magic >> version >> nvrtc >> sizes_text >> checksum_text)) return std::nullopt;
  if (magic != kMagic || version != kFormatVersion || nvrtc != "nvrtc=" + key.nvrtc) return std::nullopt;
  size_t sizes[5];
  unsigned long long checksum = 0;
  if (std::sscanf(sizes_text.c_str(), "sizes=%zu,%zu,%zu,%zu,%zu", &sizes[0], &sizes[1], &sizes[2], &sizes[3],
                  &sizes[4]) != 5 ||
      std::sscanf(checksum_text.c_str(), "fnv1a=%16llx", &checksum) != 1)
    return std::nullopt;
  std::string_view body = std::string_view(entry).substr(header_end + 1);
  size_t total = 0;
  for (size_t size : sizes) {
    if (size > body.size()) return std::nullopt;
    total += size;
  }
  if (total != body.size() || fnv1a64(body) != checksum) return std::nullopt;
  std::string_view sections[5];
  for (size_t i = 0, at = 0; i < 5; at += sizes[i], ++i) sections[i] = body.substr(at, sizes[i]);
  if (sections[0] != key.name || sections[1] != key.options || sections[2] != key.source) return std::nullopt;

  CompileResult result;
  result.log = std::string(sections[3]);
  result.cubin.assign(sections[4].begin(), sections[4].end());
  try {
    if (read_cubin_info(result.cubin).sm != key.sm) return std::nullopt;
  } catch (const Error &) {
    return std::nullopt;
  }
  result.resources = parse_ptxas_report(result.log);
  return result;
}

std::filesystem::path entry_file(const std::filesystem::path &directory, const Key &key) {
  return directory / fmt::format("{:016x}.kernel", hash_of(key));
}

std::optional<std::string> read_file(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return std::move(contents).str();
}

// Writes next to `path` under a name no other thread or process uses, then renames over `path`.
void write_atomically(const std::filesystem::path &path, const std::string &contents) {
  static std::atomic<uint64_t> writes = 0;
  std::filesystem::path temporary = path;
  temporary += fmt::format(".tmp-{}-{}", getpid(), writes++);
  auto failed = [&](std::string_view what) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    fail(
        "could not write the kernel cache entry {}: {}; make the directory writable or set TWIST_CACHE_DIR "
        "to "
        "one that is",
        path.string(), what);
  };
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) failed("cannot create " + temporary.string());
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.close();
    if (!out) failed("writing " + temporary.string() + " failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) failed("renaming " + temporary.string() + " into place failed: " + ec.message());
}

}  // namespace

KernelCache::KernelCache(std::filesystem::path directory) : directory_(std::move(directory)) {}

std::filesystem::path KernelCache::entry_path(const std::string &source, const std::string &name,
                                              const CompileOptions &options) const {
  return entry_file(directory_, key_of(source, name, options));
}

CompileResult KernelCache::compile(const std::string &source, const std::string &name,
                                   const CompileOptions &options) {
  Key key = key_of(source, name, options);
  std::filesystem::path path = entry_file(directory_, key);
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    std::optional<std::string> entry = read_file(path);
    if (entry)
      if (std::optional<CompileResult> cached = decode(*entry, key)) {
        ++hits_;
        return std::move(*cached);
      }
    ++rejected_;
  }
  CompileResult result = cuda::compile(source, name, options);
  ++compiles_;
  std::filesystem::create_directories(directory_, ec);
  if (ec)
    fail("could not create the kernel cache directory {}: {}; set TWIST_CACHE_DIR to a writable directory",
         directory_.string(), ec.message());
  write_atomically(path, encode(key, result));
  return result;
}

CacheStats KernelCache::stats() const {
  return {hits_.load(), compiles_.load(), rejected_.load()};
}

std::filesystem::path default_cache_directory() {
  auto variable = [](const char *name) -> std::optional<std::filesystem::path> {
    const char *value = std::getenv(name);
    if (value == nullptr || *value == '\0') return std::nullopt;
    return std::filesystem::path(value);
  };
  if (auto dir = variable("TWIST_CACHE_DIR")) return *dir;
  if (auto dir = variable("XDG_CACHE_HOME")) return *dir / "twist";
  if (auto dir = variable("HOME")) return *dir / ".cache" / "twist";
  fail(
      "twist has nowhere to cache kernels: none of TWIST_CACHE_DIR, XDG_CACHE_HOME and HOME is set; set "
      "TWIST_CACHE_DIR to a writable directory");
}

KernelCache &default_kernel_cache() {
  static KernelCache cache(default_cache_directory());
  return cache;
}

std::vector<char> cached_compile(const std::string &source, const std::string &name,
                                 const CompileOptions &options) {
  return default_kernel_cache().compile(source, name, options).cubin;
}

}  // namespace twist::cuda
