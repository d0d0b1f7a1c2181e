#include "data/compressed.h"

#include <sys/stat.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "core/error.h"
#include "util/strings.h"

namespace titan::data {

namespace {

bool ends_with_ci(const std::string& s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (size_t i = 0; i < suffix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[s.size() - suffix.size() + i])) != suffix[i]) return false;
  return true;
}

std::string after_line(uint64_t line) { return line ? "after line " + std::to_string(line) : "before the first line"; }

constexpr size_t kInChunk = size_t(1) << 20;

// Damage found while decompressing: what (e.g. "corrupt gzip data") and the library's detail.
// The bytes decoded before it are handed out first; the error is raised on the next read, naming
// the last line handed out.
struct Damage {
  std::string what, detail;
};

}  // namespace

Compression compression_of(const std::string& path) {
  if (ends_with_ci(path, ".gz")) return Compression::Gzip;
  if (ends_with_ci(path, ".zst")) return Compression::Zstd;
  return Compression::None;
}

const char* compression_name(Compression c) {
  switch (c) {
    case Compression::Gzip: return "gzip";
    case Compression::Zstd: return "zstd";
    case Compression::None: break;
  }
  return "none";
}

struct ByteReader::Impl {
  std::string path;
  Compression c;
  std::FILE* f = nullptr;
  std::vector<char> in;
  size_t in_at = 0, in_end = 0;
  bool file_eof = false;
  uint64_t consumed = 0;  // compressed bytes read from the file
  // gzip
  z_stream z{};
  bool z_open = false, member_open = false;
  uint64_t members = 0;
  // zstd
  ZSTD_DCtx* zd = nullptr;
  std::optional<Damage> damage;
  size_t zstd_hint = 0;  // ZSTD_decompressStream's last return: 0 at a frame's end
  bool frame_open = false;

  // Refills `in` when empty; false at the end of the file.
  bool fill() {
    if (in_at < in_end) return true;
    if (file_eof) return false;
    in_at = 0;
    in_end = std::fread(in.data(), 1, in.size(), f);
    TITAN_CHECK(!std::ferror(f), path, ": read error: ", std::strerror(errno));
    if (in_end < in.size()) file_eof = true;
    consumed += in_end;
    return in_end > 0;
  }

  size_t read_gzip(char* buf, size_t cap, size_t& got) {
    while (got < cap) {
      const bool have = fill();
      if (!have && !member_open) return got;
      if (have && !member_open) {
        // A member starts with the gzip magic; other bytes after a member are no data.
        if (static_cast<unsigned char>(in[in_at]) != 0x1f)
          throw Damage{members ? "bytes after the last gzip member that start no member" : "not gzip data (no gzip header)", ""};
        TITAN_CHECK(inflateReset(&z) == Z_OK, path, ": zlib reset failed");
        member_open = true;
        ++members;
      }
      z.next_in = have ? reinterpret_cast<Bytef*>(in.data() + in_at) : nullptr;
      z.avail_in = have ? uInt(in_end - in_at) : 0;
      z.next_out = reinterpret_cast<Bytef*>(buf + got);
      z.avail_out = uInt(std::min<size_t>(cap - got, UINT32_MAX));
      const int r = inflate(&z, Z_NO_FLUSH);
      if (have) in_at = in_end - z.avail_in;
      const size_t now = size_t(reinterpret_cast<char*>(z.next_out) - buf);
      const bool produced = now > got;
      got = now;
      if (r == Z_STREAM_END) {
        member_open = false;
        continue;
      }
      if (r != Z_OK && r != Z_BUF_ERROR)
        throw Damage{"corrupt gzip data", z.msg ? std::string(z.msg) : "zlib error " + std::to_string(r)};
      if (!have && !produced) throw Damage{"truncated: ends inside a gzip member", ""};
    }
    return got;
  }

  size_t read_zstd(char* buf, size_t cap, size_t& got) {
    ZSTD_outBuffer out{buf, cap, got};
    while (out.pos < out.size) {
      const bool have = fill();
      if (!have && !frame_open) break;
      ZSTD_inBuffer inb{have ? in.data() + in_at : nullptr, have ? in_end - in_at : 0, 0};
      const size_t before = out.pos;
      const size_t r = ZSTD_decompressStream(zd, &out, &inb);
      in_at += inb.pos;
      got = out.pos;
      if (ZSTD_isError(r)) throw Damage{"corrupt zstd data", ZSTD_getErrorName(r)};
      frame_open = r != 0;
      if (!have && out.pos == before && frame_open) throw Damage{"truncated: ends inside a zstd frame", ""};
    }
    return out.pos;
  }
};

ByteReader::ByteReader(const std::string& path, Compression c) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.c = c;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0)
    if (const char* why = not_a_file_reason(st.st_mode)) fail(path, ": ", why);
  m.f = std::fopen(path.c_str(), "rb");
  TITAN_CHECK(m.f, path, ": cannot open for reading: ", std::strerror(errno));
  m.in.resize(kInChunk);
  if (c == Compression::Gzip) {
    TITAN_CHECK(inflateInit2(&m.z, 15 + 16) == Z_OK, path, ": zlib init failed");
    m.z_open = true;
  } else if (c == Compression::Zstd) {
    m.zd = ZSTD_createDCtx();
    TITAN_CHECK(m.zd, path, ": zstd init failed");
  }
}

ByteReader::~ByteReader() {
  if (!impl_) return;
  if (impl_->z_open) inflateEnd(&impl_->z);
  if (impl_->zd) ZSTD_freeDCtx(impl_->zd);
  if (impl_->f) std::fclose(impl_->f);
}

size_t ByteReader::read(char* buf, size_t cap, uint64_t line) {
  Impl& m = *impl_;
  if (cap == 0) return 0;
  if (m.damage)
    fail(m.path, ": ", m.damage->what, ", ", after_line(line), m.damage->detail.empty() ? "" : " (" + m.damage->detail + ")");
  if (m.c != Compression::None) {
    size_t got = 0;
    try {
      return m.c == Compression::Gzip ? m.read_gzip(buf, cap, got) : m.read_zstd(buf, cap, got);
    } catch (const Damage& d) {
      m.damage = d;
    }
    if (got > 0) return got;
    return read(buf, cap, line);
  }
  size_t got = 0;
  while (got < cap && m.fill()) {
    const size_t take = std::min(cap - got, m.in_end - m.in_at);
    std::memcpy(buf + got, m.in.data() + m.in_at, take);
    m.in_at += take;
    got += take;
  }
  return got;
}

uint64_t ByteReader::compressed_bytes() const { return impl_->consumed; }
const std::string& ByteReader::path() const { return impl_->path; }

LineReader::LineReader(const std::string& path) : LineReader(path, compression_of(path)) {}
LineReader::LineReader(const std::string& path, Compression c) : in_(path, c) {}

bool LineReader::next(std::string* line) {
  constexpr size_t kChunk = size_t(1) << 20;
  size_t scanned = at_;  // where to look for '\n' from
  while (true) {
    const size_t nl = buf_.find('\n', scanned);
    if (nl != std::string::npos) {
      line->assign(buf_, at_, nl - at_);
      at_ = nl + 1;
      ++line_no_;
      return true;
    }
    if (eof_) {
      if (at_ >= buf_.size()) return false;
      line->assign(buf_, at_, std::string::npos);
      at_ = buf_.size();
      ++line_no_;
      return true;
    }
    // Keep the unread tail, then append the next decompressed piece.
    buf_.erase(0, at_);
    at_ = 0;
    scanned = buf_.size();
    const size_t old = buf_.size();
    buf_.resize(old + kChunk);
    const size_t got = in_.read(buf_.data() + old, kChunk, line_no_);
    buf_.resize(old + got);
    if (got == 0) eof_ = true;
  }
}

std::string read_decompressed(const std::string& path) {
  ByteReader in(path, compression_of(path));
  std::string out;
  constexpr size_t kChunk = size_t(1) << 20;
  while (true) {
    const size_t old = out.size();
    out.resize(old + kChunk);
    const size_t got = in.read(out.data() + old, kChunk, 0);
    out.resize(old + got);
    if (got == 0) return out;
  }
}

}  // namespace titan::data
