#include "train/tensor_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "train/crc32c.h"

namespace titan {
namespace {

constexpr char kMagic[9] = "TTCKPT01";
constexpr char kEndMagic[9] = "TTCKEND1";
constexpr uint64_t kAlign = 64;
constexpr uint64_t kFooter = 8 + 4 + 8;

class Fd {
 public:
  Fd(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    TITAN_CHECK(fd_ >= 0, path, ": cannot create: ", std::strerror(errno));
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      ssize_t w = ::write(fd_, c, n);
      if (w < 0 && errno == EINTR) continue;
      TITAN_CHECK(w > 0, path_, ": write failed: ", std::strerror(errno));
      c += w;
      n -= size_t(w);
      pos_ += uint64_t(w);
    }
  }
  void pad_to(uint64_t align) {
    static const char zeros[kAlign] = {};
    uint64_t r = pos_ % align;
    if (r) write(zeros, align - r);
  }
  void sync_close() {
    int fd = fd_;
    fd_ = -1;
    TITAN_CHECK(::fsync(fd) == 0, path_, ": fsync failed: ", std::strerror(errno));
    TITAN_CHECK(::close(fd) == 0, path_, ": close failed: ", std::strerror(errno));
  }
  uint64_t pos() const { return pos_; }

 private:
  std::string path_;
  int fd_;
  uint64_t pos_ = 0;
};

void put_le(std::string& o, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) o += char(uint8_t(v >> (8 * i)));
}
uint64_t get_le(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return v;
}

void pread_all(int fd, void* dst, uint64_t n, uint64_t off, const std::string& path) {
  char* d = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, d, n, off_t(off));
    if (r < 0 && errno == EINTR) continue;
    TITAN_CHECK(r > 0, path, ": read failed at byte ", off, r == 0 ? ": unexpected end of file" : ": ",
                r == 0 ? "" : std::strerror(errno));
    d += r;
    off += uint64_t(r);
    n -= uint64_t(r);
  }
}

}  // namespace

void write_tensor_file(const std::string& path, const std::vector<NamedTensor>& tensors) {
  std::set<std::string> seen;
  for (auto& t : tensors) {
    TITAN_CHECK(!t.name.empty(), path, ": tensor with an empty name");
    TITAN_CHECK(seen.insert(t.name).second, path, ": duplicate tensor name '", t.name, "'");
    TITAN_CHECK(t.tensor.defined(), path, ": tensor '", t.name, "' is undefined");
    TITAN_CHECK(t.tensor.device().type == DeviceType::CPU, path, ": tensor '", t.name, "' is not on the CPU");
  }
  Fd f(path);
  f.write(kMagic, 8);
  nlohmann::json index = {{"format", "titan-tensors"}, {"version", 1}, {"tensors", nlohmann::json::array()}};
  for (auto& t : tensors) {
    f.pad_to(kAlign);
    uint64_t off = f.pos(), n = t.tensor.nbytes();
    f.write(t.tensor.raw(), n);
    index["tensors"].push_back({{"name", t.name},
                                {"dtype", dtype_name(t.tensor.dtype())},
                                {"shape", t.tensor.shape()},
                                {"offset", off},
                                {"nbytes", n},
                                {"crc32c", crc32c(t.tensor.raw(), n)}});
  }
  std::string idx = index.dump();
  f.write(idx.data(), idx.size());
  std::string footer;
  put_le(footer, idx.size(), 8);
  put_le(footer, crc32c(idx.data(), idx.size()), 4);
  footer += kEndMagic;
  f.write(footer.data(), footer.size());
  f.sync_close();
}

TensorFileReader::TensorFileReader(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY);
  TITAN_CHECK(fd_ >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  TITAN_CHECK(::fstat(fd_, &st) == 0, path, ": cannot stat: ", std::strerror(errno));
  uint64_t size = uint64_t(st.st_size);
  TITAN_CHECK(size >= 8 + kFooter, path, ": too short to be a tensor file (", size, " bytes; truncated?)");
  char head[8], foot[kFooter];
  pread_all(fd_, head, 8, 0, path);
  TITAN_CHECK(std::memcmp(head, kMagic, 8) == 0, path, ": not a titan tensor file (bad magic)");
  pread_all(fd_, foot, kFooter, size - kFooter, path);
  TITAN_CHECK(std::memcmp(foot + 12, kEndMagic, 8) == 0, path, ": bad end marker (file truncated or corrupt)");
  uint64_t idx_len = get_le(foot, 8);
  uint32_t idx_crc = uint32_t(get_le(foot + 8, 4));
  TITAN_CHECK(idx_len <= size - 8 - kFooter, path, ": index length ", idx_len, " exceeds the file (corrupt)");
  uint64_t idx_off = size - kFooter - idx_len;
  std::string idx(idx_len, '\0');
  pread_all(fd_, idx.data(), idx_len, idx_off, path);
  TITAN_CHECK(crc32c(idx.data(), idx.size()) == idx_crc, path, ": index checksum mismatch (file corrupt)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(idx);
    TITAN_CHECK(j.at("format") == "titan-tensors" && j.at("version") == 1, path, ": unsupported index format");
    uint64_t prev_end = 8;
    for (auto& e : j.at("tensors")) {
      TensorFileEntry t;
      t.name = e.at("name").get<std::string>();
      std::string dt = e.at("dtype").get<std::string>();
      TITAN_CHECK(parse_dtype(dt, &t.dtype), path, ": tensor '", t.name, "' has unknown dtype ", dt);
      t.shape = e.at("shape").get<Shape>();
      t.offset = e.at("offset").get<uint64_t>();
      t.nbytes = e.at("nbytes").get<uint64_t>();
      t.crc32c = e.at("crc32c").get<uint32_t>();
      int64_t numel = 1;
      for (int64_t d : t.shape) {
        TITAN_CHECK(d >= 0 && (d == 0 || numel <= INT64_MAX / d), path, ": tensor '", t.name, "' has a bad shape");
        numel *= d;
      }
      // numel <= size keeps the byte count below overflow before it is compared with nbytes.
      TITAN_CHECK(uint64_t(numel) <= size && uint64_t(numel) * dtype_size(t.dtype) == t.nbytes, path, ": tensor '",
                  t.name,
                  "' byte size does not match its shape and dtype");
      TITAN_CHECK(t.offset % kAlign == 0 && t.offset >= prev_end && t.offset <= idx_off &&
                      t.nbytes <= idx_off - t.offset,
                  path, ": tensor '", t.name, "' lies outside the data region (corrupt index)");
      TITAN_CHECK(find(t.name) == nullptr, path, ": duplicate tensor '", t.name, "'");
      prev_end = t.offset + t.nbytes;
      entries_.push_back(std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": malformed index: ", e.what());
  }
}

TensorFileReader::~TensorFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

const TensorFileEntry* TensorFileReader::find(const std::string& name) const {
  for (auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

void TensorFileReader::read_into(const std::string& name, Tensor& dst) const {
  const TensorFileEntry* e = find(name);
  TITAN_CHECK(e != nullptr, path_, ": no tensor '", name, "'");
  TITAN_CHECK(dst.defined() && dst.dtype() == e->dtype && dst.shape() == e->shape, path_, ": tensor '", name,
              "' is ", dtype_name(e->dtype), shape_str(e->shape), " but the destination is ",
              dst.defined() ? dst.str() : std::string("undefined"));
  pread_all(fd_, dst.raw(), e->nbytes, e->offset, path_);
  TITAN_CHECK(crc32c(dst.raw(), e->nbytes) == e->crc32c, path_, ": tensor '", name,
              "' checksum mismatch (file corrupt)");
}

Tensor TensorFileReader::read(const std::string& name) const {
  const TensorFileEntry* e = find(name);
  TITAN_CHECK(e != nullptr, path_, ": no tensor '", name, "'");
  Tensor t = Tensor::empty(e->shape, e->dtype);
  read_into(name, t);
  return t;
}

}  // namespace titan
