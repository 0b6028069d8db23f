#pragma once
// FNV-1a, 64 bits: the content hash that names kernel cache entries. It only has to spread keys over file
// names; a collision is harmless because each entry also stores its full key and is checked on read.
#include <cstdint>
#include <string_view>

namespace twist::cuda {

inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnv1a64Prime = 0x100000001b3ull;

// Continues a hash over more bytes, so that several parts can be hashed without concatenating them.
constexpr uint64_t fnv1a64(std::string_view bytes, uint64_t hash = kFnv1a64Offset) {
  for (char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= kFnv1a64Prime;
  }
  return hash;
}

}  // namespace twist::cuda
