#include "train/crc32c.h"

#include <array>

namespace titan {
namespace detail {
uint32_t crc32c_sse42(const void* data, size_t n, uint32_t crc);  // crc32c.sse42.cpp
}  // namespace detail

namespace {

// Byte-at-a-time table of the reflected polynomial.
const std::array<uint32_t, 256>& table() {
  static const std::array<uint32_t, 256> t = [] {
    std::array<uint32_t, 256> r{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      r[i] = c;
    }
    return r;
  }();
  return t;
}

}  // namespace

uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc) {
  const std::array<uint32_t, 256>& t = table();
  uint32_t c = ~crc;
  for (const auto* p = static_cast<const unsigned char*>(data); n--; ++p) c = t[(c ^ *p) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  return sse42 ? detail::crc32c_sse42(data, n, crc) : crc32c_portable(data, n, crc);
}

}  // namespace titan
