// Reader for the tokenizer golden files written by tools/oracle/tokenizer_goldens.py (the format
// is described at the top of that script).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "util/strings.h"

namespace titan::test {

struct GoldenRecord {
  std::string name;
  std::string unit;
  uint32_t repeat = 0;
  uint32_t count = 0;     // number of ids
  uint64_t hash = 0;      // FNV-1a-64 of the ids as u32 LE bytes
  bool has_ids = false;
  std::vector<uint32_t> ids;
  std::string text() const {
    std::string t;
    t.reserve(unit.size() * repeat);
    for (uint32_t i = 0; i < repeat; ++i) t += unit;
    return t;
  }
};

inline uint64_t fnv1a_ids(const std::vector<uint32_t>& ids) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t v : ids)
    for (int k = 0; k < 4; ++k) {
      h ^= (v >> (8 * k)) & 0xFF;
      h *= 1099511628211ull;
    }
  return h;
}

inline std::vector<GoldenRecord> read_goldens(const std::string& path) {
  std::string b = read_file(path);
  size_t pos = 0;
  auto need = [&](size_t n) { TITAN_CHECK(pos + n <= b.size(), path, ": truncated golden file"); };
  auto u32 = [&] {
    need(4);
    uint32_t v;
    std::memcpy(&v, b.data() + pos, 4);
    pos += 4;
    return v;
  };
  auto u64 = [&] {
    need(8);
    uint64_t v;
    std::memcpy(&v, b.data() + pos, 8);
    pos += 8;
    return v;
  };
  auto bytes = [&] {
    uint32_t n = u32();
    need(n);
    std::string s = b.substr(pos, n);
    pos += n;
    return s;
  };
  need(4);
  TITAN_CHECK(b.compare(0, 4, "TTKG") == 0, path, ": not a TTKG golden file");
  pos = 4;
  TITAN_CHECK(u32() == 1, path, ": unsupported golden version");
  uint32_t n = u32();
  std::vector<GoldenRecord> out(n);
  for (auto& r : out) {
    r.name = bytes();
    r.unit = bytes();
    r.repeat = u32();
    r.count = u32();
    r.hash = u64();
    std::string payload = bytes();
    r.has_ids = !payload.empty() || r.count == 0;
    for (size_t i = 0; i < payload.size();) {
      uint32_t v = 0;
      int shift = 0;
      for (;;) {
        TITAN_CHECK(i < payload.size(), path, ": bad varint");
        uint8_t c = static_cast<uint8_t>(payload[i++]);
        v |= uint32_t(c & 0x7F) << shift;
        shift += 7;
        if (!(c & 0x80)) break;
      }
      r.ids.push_back(v);
    }
    if (r.has_ids) TITAN_CHECK(r.ids.size() == r.count, path, ": record ", r.name, " id count mismatch");
  }
  return out;
}

}  // namespace titan::test
