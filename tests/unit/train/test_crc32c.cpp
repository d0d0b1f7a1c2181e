// crc32c: the SSE4.2 path (where the CPU has it) against the table-driven one and a known value.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "train/crc32c.h"

namespace titan {
namespace {

TEST(Crc32c, KnownValue) {
  const std::string s = "123456789";  // the CRC catalogue's check input: CRC-32C 0xE3069283
  EXPECT_EQ(crc32c(s.data(), s.size()), 0xE3069283u);
  EXPECT_EQ(crc32c_portable(s.data(), s.size()), 0xE3069283u);
  EXPECT_EQ(crc32c(s.data(), 0), 0u);
}

TEST(Crc32c, DispatchedEqualsPortableAtEveryLengthAndOffset) {
  std::vector<unsigned char> buf(300);
  uint32_t x = 12345;
  for (auto& b : buf) b = static_cast<unsigned char>((x = x * 1664525u + 1013904223u) >> 24);
  for (size_t off = 0; off < 9; ++off)
    for (size_t n = 0; off + n <= buf.size(); n += 7) {
      ASSERT_EQ(crc32c(buf.data() + off, n), crc32c_portable(buf.data() + off, n)) << off << " " << n;
      // continuation: crc(a ++ b) from crc(a)
      const size_t h = n / 2;
      ASSERT_EQ(crc32c(buf.data() + off + h, n - h, crc32c_portable(buf.data() + off, h)),
                crc32c_portable(buf.data() + off, n));
    }
}

}  // namespace
}  // namespace titan
