#include "data/byte_level.h"

#include "data/utf8.h"

namespace titan::data {

ByteLevelMap::ByteLevelMap() {
  cp_to_byte.fill(-1);
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    uint32_t cp = printable ? uint32_t(b) : next++;
    byte_to_cp[size_t(b)] = cp;
    cp_to_byte[cp] = b;
  }
}

const ByteLevelMap& byte_level_map() {
  static const ByteLevelMap m;
  return m;
}

bool byte_level_decode(std::string_view token, std::string* bytes) {
  if (!is_valid_utf8(token)) return false;
  const ByteLevelMap& m = byte_level_map();
  bytes->clear();
  size_t i = 0;
  while (i < token.size()) {
    uint32_t cp = utf8_next(token, i);
    if (cp >= m.cp_to_byte.size() || m.cp_to_byte[cp] < 0) return false;
    bytes->push_back(char(m.cp_to_byte[cp]));
  }
  return true;
}

}  // namespace titan::data
