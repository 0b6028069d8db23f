#include "scheduler/hopper_layouts.h"

#include "lang/error.h"

namespace twist::hopper {

int swizzle_bytes(Swizzle s) {
  switch (s) {
    case Swizzle::none:
      return 0;
    case Swizzle::b32:
      return 32;
    case Swizzle::b64:
      return 64;
    case Swizzle::b128:
      return 128;
  }
  return 0;
}

int swizzle_alignment(Swizzle s) {
  return s == Swizzle::none ? 16 : 8 * swizzle_bytes(s);
}

int64_t swizzled_address(int64_t address, Swizzle s) {
  if (s == Swizzle::none) return address;
  const int bits = s == Swizzle::b32 ? 1 : s == Swizzle::b64 ? 2 : 3;
  return address ^ (((address >> 7) & ((1 << bits) - 1)) << 4);
}

int swizzle_mode_code(Swizzle s) {
  switch (s) {
    case Swizzle::none:
      return 0;
    case Swizzle::b128:
      return 1;
    case Swizzle::b64:
      return 2;
    case Swizzle::b32:
      return 3;
  }
  return 0;
}

uint64_t encode(const MatrixDescriptor &d) {
  const auto field = [](int64_t bytes, const char *what) {
    TWIST_CHECK(bytes >= 0 && bytes % 16 == 0 && (bytes >> 4) < (1 << 14),
                "a wgmma descriptor's {} of {} bytes is not a multiple of 16 below 2^18", what, bytes);
    return static_cast<uint64_t>(bytes >> 4);
  };
  return field(d.start_address, "start address") | field(d.leading_bytes, "leading byte offset") << 16 |
         field(d.stride_bytes, "stride byte offset") << 32 |
         static_cast<uint64_t>(swizzle_mode_code(d.swizzle)) << 62;
}

MatrixDescriptor decode(uint64_t bits) {
  constexpr uint64_t kField = (1u << 14) - 1;
  static constexpr Swizzle kModes[4] = {Swizzle::none, Swizzle::b128, Swizzle::b64, Swizzle::b32};
  return {static_cast<int64_t>(bits & kField) << 4, static_cast<int64_t>((bits >> 16) & kField) << 4,
          static_cast<int64_t>((bits >> 32) & kField) << 4, kModes[bits >> 62]};
}

int64_t element_address(const MatrixDescriptor &d, Major major, int row, int k) {
  constexpr int kElementBytes = 2, kChunk = 16, kChunkElements = kChunk / kElementBytes;
  const int width = swizzle_bytes(d.swizzle);
  int64_t offset;
  if (major == Major::k && width > 0)
    offset = (row % 8) * width + (row / 8) * d.stride_bytes + k * kElementBytes;
  else if (major == Major::k)
    offset = (row % 8) * kChunk + (row / 8) * d.stride_bytes + (k % kChunkElements) * kElementBytes +
             (k / kChunkElements) * d.leading_bytes;
  else if (width > 0)
    offset = (row % (width / kElementBytes)) * kElementBytes +
             (row / (width / kElementBytes)) * d.leading_bytes + (k % 8) * width + (k / 8) * d.stride_bytes;
  else
    offset = (row % kChunkElements) * kElementBytes + (row / kChunkElements) * d.stride_bytes +
             (k % 8) * kChunk + (k / 8) * d.leading_bytes;
  return swizzled_address(d.start_address + offset, d.swizzle);
}

bool is_wgmma_n(int n) {
  return n >= 8 && n <= 256 && n % 8 == 0;
}

FragmentPosition accumulator_position(int thread, int i) {
  const int w = thread / 32, g = (thread % 32) / 4, q = thread % 4;
  return {16 * w + g + 8 * ((i % 4) / 2), 8 * (i / 4) + 2 * q + i % 2};
}

FragmentPosition register_a_position(int thread, int i) {
  const int w = thread / 32, g = (thread % 32) / 4, q = thread % 4;
  return {16 * w + g + 8 * ((i / 2) % 2), 2 * q + i % 2 + 8 * (i / 4)};
}

}  // namespace twist::hopper
