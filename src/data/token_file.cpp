#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "data/token_cache.h"
#include "util/strings.h"

namespace titan::data {

namespace {

constexpr char kMagic[8] = {'T', 'I', 'T', 'A', 'N', 'T', 'O', 'K'};
constexpr uint32_t kVersion = 1;

void encode_header(const TokenFileHeader& h, unsigned char* out) {
  std::memset(out, 0, kTokenFileHeaderBytes);
  std::memcpy(out, kMagic, 8);
  uint32_t u32s[4] = {kVersion, uint32_t(kTokenFileHeaderBytes), h.vocab_size, h.eot_id};
  std::memcpy(out + 8, u32s, sizeof u32s);
  uint64_t u64s[3] = {h.token_count, h.document_count, h.tokenizer_fingerprint};
  std::memcpy(out + 24, u64s, sizeof u64s);
  if (h.cache_file) std::memcpy(out + 48, kTokenCacheTag, 8);
}

}  // namespace

bool has_token_cache_header(const unsigned char* p, size_t n) {
  return n >= kTokenFileHeaderBytes && std::memcmp(p, kMagic, 8) == 0 && std::memcmp(p + 48, kTokenCacheTag, 8) == 0;
}

TokenFileWriter::TokenFileWriter(const std::string& path, uint32_t vocab_size, uint32_t eot_id, uint64_t fp, bool cache_file)
    : path_(path), tmp_(path + ".tmp." + host_name() + "." + std::to_string(::getpid())), tmp_guard_(tmp_) {
  TITAN_CHECK(vocab_size > 0, path, ": vocab size must be positive");
  TITAN_CHECK(eot_id == 0xFFFFFFFFu || eot_id < vocab_size, path, ": separator id ", eot_id, " >= vocab size");
  header_.vocab_size = vocab_size;
  header_.eot_id = eot_id;
  header_.tokenizer_fingerprint = fp;
  header_.cache_file = cache_file;
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  TITAN_CHECK(fd_ >= 0, tmp_, ": cannot create: ", std::strerror(errno));
  unsigned char hdr[kTokenFileHeaderBytes];
  encode_header(header_, hdr);
  write_bytes(hdr, sizeof hdr);
}

TokenFileWriter::~TokenFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void TokenFileWriter::write_bytes(const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t w = ::write(fd_, c, n);
    if (w < 0 && errno == EINTR) continue;
    TITAN_CHECK(w > 0, tmp_, ": write failed: ", std::strerror(errno));
    c += w;
    n -= size_t(w);
  }
}

void TokenFileWriter::add_document(const std::vector<uint32_t>& ids) {
  TITAN_CHECK(fd_ >= 0, path_, ": writer already closed");
  for (uint32_t id : ids) TITAN_CHECK(id < header_.vocab_size, path_, ": token id ", id, " >= vocab size ", header_.vocab_size);
  buf_.insert(buf_.end(), ids.begin(), ids.end());
  if (header_.eot_id != 0xFFFFFFFFu) buf_.push_back(header_.eot_id);
  header_.token_count += ids.size() + (header_.eot_id != 0xFFFFFFFFu);
  ++header_.document_count;
  if (buf_.size() >= (1u << 20)) {
    write_bytes(buf_.data(), buf_.size() * 4);
    buf_.clear();
  }
}

void TokenFileWriter::close() {
  TITAN_CHECK(fd_ >= 0, path_, ": writer already closed");
  write_bytes(buf_.data(), buf_.size() * 4);
  buf_.clear();
  unsigned char hdr[kTokenFileHeaderBytes];
  encode_header(header_, hdr);
  TITAN_CHECK(::pwrite(fd_, hdr, sizeof hdr, 0) == ssize_t(sizeof hdr), tmp_, ": header write failed: ", std::strerror(errno));
  TITAN_CHECK(::fsync(fd_) == 0, tmp_, ": fsync failed: ", std::strerror(errno));
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp_.c_str());
    fail(path_, ": rename failed: ", std::strerror(e));
  }
}

std::shared_ptr<const TokenFile> TokenFile::open(const std::string& path) {
  std::shared_ptr<TokenFile> f(new TokenFile());
  f->path_ = path;
  check_regular_file(path);  // a named pipe would block open() for ever
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  TITAN_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail(path, ": cannot stat: ", std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {  // mmap needs a regular file; a folder would fail there as "No such device"
    ::close(fd);
    const char* why = not_a_file_reason(st.st_mode);
    fail(path, ": ", why ? why : "is not a regular file (a pipe)");
  }
  size_t bytes = size_t(st.st_size);
  if (bytes < kTokenFileHeaderBytes) {
    ::close(fd);
    fail(path, ": not a token file (", bytes, " bytes, shorter than the 64-byte header)");
  }
  void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  TITAN_CHECK(map != MAP_FAILED, path, ": mmap failed: ", std::strerror(errno));
  f->map_ = map;
  f->map_bytes_ = bytes;
  const unsigned char* p = static_cast<const unsigned char*>(map);
  TITAN_CHECK(std::memcmp(p, kMagic, 8) == 0, path, ": not a token file (bad magic; expected TITANTOK)");
  uint32_t u32s[4];
  std::memcpy(u32s, p + 8, sizeof u32s);
  TITAN_CHECK(u32s[0] == kVersion, path, ": token file version ", u32s[0], " is not supported (expected ", kVersion, ")");
  TITAN_CHECK(u32s[1] == kTokenFileHeaderBytes, path, ": bad header size ", u32s[1]);
  uint64_t u64s[3];
  std::memcpy(u64s, p + 24, sizeof u64s);
  TokenFileHeader& h = f->header_;
  h.vocab_size = u32s[2];
  h.eot_id = u32s[3];
  h.token_count = u64s[0];
  h.document_count = u64s[1];
  h.tokenizer_fingerprint = u64s[2];
  h.cache_file = std::memcmp(p + 48, kTokenCacheTag, 8) == 0;
  TITAN_CHECK(h.vocab_size > 0, path, ": vocab size 0 in header");
  uint64_t have = (bytes - kTokenFileHeaderBytes) / 4;
  TITAN_CHECK(h.token_count <= have, path, ": truncated: the header promises ", h.token_count, " tokens but the file holds ",
              have);
  TITAN_CHECK(bytes == kTokenFileHeaderBytes + h.token_count * 4, path, ": ", bytes - kTokenFileHeaderBytes - h.token_count * 4,
              " unexpected bytes after the ", h.token_count, " tokens");
  f->tokens_ = reinterpret_cast<const uint32_t*>(p + kTokenFileHeaderBytes);
  ::madvise(map, bytes, MADV_SEQUENTIAL);
  // One linear pass (memory bandwidth bound) so that a bad id is caught here and not in a kernel.
  const uint32_t* t = f->tokens_;
  uint32_t vs = h.vocab_size;
  uint64_t bad = h.token_count;
  for (uint64_t i = 0; i < h.token_count; ++i) {
    if (t[i] >= vs) {
      bad = i;
      break;
    }
  }
  TITAN_CHECK(bad == h.token_count, path, ": token ", bad, " has id ", bad < h.token_count ? t[bad] : 0,
              ", not below the vocab size ", vs);
  return f;
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

}  // namespace titan::data
