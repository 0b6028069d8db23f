#include <doctest/doctest.h>

#include "backends/cuda/runtime/content_hash.h"

using namespace twist::cuda;

TEST_CASE("fnv1a64 matches the published FNV-1a 64-bit test vectors and chains over parts") {
  CHECK(fnv1a64("") == 0xcbf29ce484222325ull);
  CHECK(fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  CHECK(fnv1a64("foobar") == 0x85944171f73967e8ull);
  CHECK(fnv1a64("bar", fnv1a64("foo")) == fnv1a64("foobar"));
  CHECK(fnv1a64(std::string_view("\0", 1)) != fnv1a64(""));
  static_assert(fnv1a64("a") == 0xaf63dc4c8601ec8cull, "usable at compile time");
}
