// The GPT-2 byte-to-character mapping used by byte-level BPE vocabularies ("ByteLevel" in
// tokenizer.json): printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves; the
// other 68 bytes (controls, space, 0x7F..0xA0, 0xAD) map in byte order to U+0100, U+0101, ...
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace titan::data {

struct ByteLevelMap {
  std::array<uint32_t, 256> byte_to_cp{};
  // Inverse over code points < 0x200 (all images lie below U+0144); -1 where a code point is no image.
  std::array<int, 0x200> cp_to_byte{};
  ByteLevelMap();
};
const ByteLevelMap& byte_level_map();

// Raw bytes of a byte-level token string; false when some character is not an image of a byte
// (or the string is not valid UTF-8).
bool byte_level_decode(std::string_view token, std::string* bytes);

}  // namespace titan::data
