#include "train/crc32c.h"

#include <nmmintrin.h>

#include <cstring>

namespace titan {

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  // The CRC register holds the complement between calls (init and final xor are ~0).
  uint64_t c = ~crc;
  const auto* p = static_cast<const unsigned char*>(data);
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = uint32_t(c);
  while (n--) c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

}  // namespace titan
