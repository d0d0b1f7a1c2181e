#include "train/tensorboard.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "train/crc32c.h"
#include "util/strings.h"

namespace titan {
namespace {

// ---- minimal protobuf encoding (wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32) ----

void put_varint(std::string& o, uint64_t v) {
  while (v >= 0x80) {
    o += char(uint8_t(v) | 0x80);
    v >>= 7;
  }
  o += char(uint8_t(v));
}
void put_tag(std::string& o, uint32_t field, uint32_t wire) { put_varint(o, (uint64_t(field) << 3) | wire); }
void put_fixed64(std::string& o, uint64_t v) {
  for (int i = 0; i < 8; ++i) o += char(uint8_t(v >> (8 * i)));
}
void put_fixed32(std::string& o, uint32_t v) {
  for (int i = 0; i < 4; ++i) o += char(uint8_t(v >> (8 * i)));
}
void put_bytes(std::string& o, uint32_t field, const std::string& b) {
  put_tag(o, field, 2);
  put_varint(o, b.size());
  o += b;
}
void put_double(std::string& o, uint32_t field, double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  put_tag(o, field, 1);
  put_fixed64(o, u);
}

std::string event_header(double wall_time, int64_t step) {
  std::string e;
  put_double(e, 1, wall_time);
  put_tag(e, 2, 0);
  put_varint(e, uint64_t(step));  // int64: negative values take 10 bytes, as protobuf specifies
  return e;
}

double now_seconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

// ---- decoding ----

struct Cursor {
  const std::string& buf;
  size_t pos, end;
  const std::string& file;
  bool done() const { return pos >= end; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      TITAN_CHECK(pos < end, file, ": malformed event protobuf (truncated varint)");
      uint8_t b = uint8_t(buf[pos++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail(file, ": malformed event protobuf (varint too long)");
  }
  uint64_t fixed(int n) {
    TITAN_CHECK(end - pos >= size_t(n), file, ": malformed event protobuf (truncated fixed field)");
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t(uint8_t(buf[pos + i])) << (8 * i);
    pos += n;
    return v;
  }
  // Returns [begin, end) of a length-delimited field.
  std::pair<size_t, size_t> bytes() {
    uint64_t n = varint();
    TITAN_CHECK(n <= end - pos, file, ": malformed event protobuf (length past the end)");
    size_t b = pos;
    pos += n;
    return {b, pos};
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0: varint(); break;
      case 1: fixed(8); break;
      case 2: bytes(); break;
      case 5: fixed(4); break;
      default: fail(file, ": malformed event protobuf (wire type ", wire, ")");
    }
  }
};

uint32_t le32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& folder) {
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  TITAN_CHECK(!ec, folder, ": cannot create TensorBoard folder: ", ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  path_ = folder + "/events.out.tfevents." + std::to_string(int64_t(now_seconds())) + "." + host + "." +
          std::to_string(::getpid());
  f_ = std::fopen(path_.c_str(), "wb");
  TITAN_CHECK(f_ != nullptr, path_, ": cannot create: ", std::strerror(errno));
  std::string first = event_header(now_seconds(), 0);
  put_bytes(first, 3, "brain.Event:2");
  write_record(first);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::write_record(const std::string& data) {
  std::string rec;
  put_fixed64(rec, data.size());
  uint32_t len_crc = crc32c_mask(crc32c(rec.data(), 8));
  put_fixed32(rec, len_crc);
  rec += data;
  put_fixed32(rec, crc32c_mask(crc32c(data.data(), data.size())));
  TITAN_CHECK(std::fwrite(rec.data(), 1, rec.size(), f_) == rec.size() && std::fflush(f_) == 0, path_,
              ": write failed: ", std::strerror(errno));
}

void TensorBoardWriter::add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values,
                                    double wall_time) {
  std::string summary;
  for (auto& [tag, v] : values) {
    std::string val;
    put_bytes(val, 1, tag);
    float f = float(v);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    put_tag(val, 2, 5);
    put_fixed32(val, u);
    put_bytes(summary, 1, val);
  }
  std::string e = event_header(wall_time < 0 ? now_seconds() : wall_time, step);
  put_bytes(e, 5, summary);
  write_record(e);
}

void TensorBoardWriter::add_session_start(int64_t step, double wall_time) {
  std::string session_log;
  put_tag(session_log, 1, 0);
  put_varint(session_log, 1);  // SessionLog.START
  std::string e = event_header(wall_time < 0 ? now_seconds() : wall_time, step);
  put_bytes(e, 7, session_log);
  write_record(e);
}

std::vector<std::string> read_tfrecords(const std::string& path) {
  std::string b = read_file(path);
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < b.size()) {
    TITAN_CHECK(b.size() - pos >= 12, path, ": truncated record header at byte ", pos);
    uint64_t len;
    std::memcpy(&len, b.data() + pos, 8);
    TITAN_CHECK(crc32c_mask(crc32c(b.data() + pos, 8)) == le32(b.data() + pos + 8), path,
                ": record length CRC mismatch at byte ", pos);
    pos += 12;
    TITAN_CHECK(len <= b.size() - pos && b.size() - pos - len >= 4, path, ": truncated record at byte ", pos);
    TITAN_CHECK(crc32c_mask(crc32c(b.data() + pos, len)) == le32(b.data() + pos + len), path,
                ": record data CRC mismatch at byte ", pos);
    out.emplace_back(b.data() + pos, len);
    pos += len + 4;
  }
  return out;
}

TbEvents read_tb_events(const std::string& path) {
  TbEvents ev;
  for (const std::string& rec : read_tfrecords(path)) {
    Cursor c{rec, 0, rec.size(), path};
    double wall = 0;
    int64_t step = 0;
    std::vector<std::pair<std::string, float>> vals;
    while (!c.done()) {
      uint64_t key = c.varint();
      uint32_t field = uint32_t(key >> 3), wire = uint32_t(key & 7);
      if (field == 1 && wire == 1) {
        uint64_t u = c.fixed(8);
        std::memcpy(&wall, &u, 8);
      } else if (field == 2 && wire == 0) {
        step = int64_t(c.varint());
      } else if (field == 3 && wire == 2) {
        auto [b, e] = c.bytes();
        ev.file_version = rec.substr(b, e - b);
      } else if (field == 5 && wire == 2) {
        auto [sb, se] = c.bytes();
        Cursor s{rec, sb, se, path};
        while (!s.done()) {
          uint64_t sk = s.varint();
          if ((sk >> 3) != 1 || (sk & 7) != 2) {
            s.skip(uint32_t(sk & 7));
            continue;
          }
          auto [vb, ve] = s.bytes();
          Cursor v{rec, vb, ve, path};
          std::string tag;
          float value = 0;
          bool has_value = false;
          while (!v.done()) {
            uint64_t vk = v.varint();
            if (vk == ((1u << 3) | 2)) {
              auto [tb, te] = v.bytes();
              tag = rec.substr(tb, te - tb);
            } else if (vk == ((2u << 3) | 5)) {
              uint32_t u = uint32_t(v.fixed(4));
              std::memcpy(&value, &u, 4);
              has_value = true;
            } else {
              v.skip(uint32_t(vk & 7));
            }
          }
          if (has_value) vals.emplace_back(tag, value);
        }
      } else {
        c.skip(wire);
      }
    }
    for (auto& [t, v] : vals) ev.scalars.push_back({step, wall, t, v});
  }
  return ev;
}

}  // namespace titan
