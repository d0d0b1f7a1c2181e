// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by TFRecord framing and by the
// training-checkpoint tensor files. Computed with the SSE4.2 crc32 instruction where the CPU has
// it (crc32c.sse42.cpp), else byte by byte from a table.
#pragma once
#include <cstddef>
#include <cstdint>

namespace titan {

// Continue a CRC over more bytes: crc32c(b, crc32c(a)) == crc32c(a ++ b). Start with crc = 0.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// The same CRC from a table, byte by byte (what crc32c runs on a CPU without SSE4.2).
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc = 0);

// TensorFlow's masked CRC: rotate right by 15 and add 0xa282ead8 (so that CRCs of data that
// itself contains CRCs stay well distributed).
inline uint32_t crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace titan
