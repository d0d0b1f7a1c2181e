// CRC-32C with the SSE4.2 crc32 instruction (crc32c.cpp calls it after its CPU check; this file
// alone is compiled for SSE4.2, CMakeLists.txt).
#include <nmmintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace titan::detail {

uint32_t crc32c_sse42(const void* data, size_t n, uint32_t crc) {
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

}  // namespace titan::detail
