#include "train/tensor_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/gpu_memory.h"
#include "core/pinned_staging.h"
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

// Element count of a shape read from a file or given by a caller; -1 when a dimension is negative
// or the product overflows.
int64_t checked_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0 || (d != 0 && n > INT64_MAX / d)) return -1;
    n *= d;
  }
  return n;
}

std::string range_str(int64_t b, int64_t e) { return "[" + std::to_string(b) + ", " + std::to_string(e) + ")"; }

// Pieces of one name must not overlap: `ranges` holds (first element, count) of non-empty pieces.
void check_disjoint(std::vector<std::pair<int64_t, int64_t>> ranges, const std::string& path,
                    const std::string& name) {
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    auto [b0, n0] = ranges[i - 1];
    auto [b1, n1] = ranges[i];
    TITAN_CHECK(b1 >= b0 + n0, path, ": pieces of tensor '", name, "' overlap (elements ", range_str(b0, b0 + n0),
                " and ", range_str(b1, b1 + n1), ")");
  }
}

}  // namespace

void write_tensor_pieces(const std::string& path, const std::vector<TensorPiece>& pieces) {
  struct Seen {
    Shape full_shape;
    DType dtype;
    bool whole = false;
    std::vector<std::pair<int64_t, int64_t>> ranges;
  };
  std::map<std::string, Seen> seen;
  std::vector<bool> write(pieces.size(), false), partial(pieces.size(), false), boxed(pieces.size(), false);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const TensorPiece& p = pieces[i];
    TITAN_CHECK(!p.name.empty(), path, ": tensor with an empty name");
    TITAN_CHECK(p.data.defined(), path, ": tensor '", p.name, "' is undefined");
    const int64_t full = checked_numel(p.full_shape), n = p.data.numel();
    TITAN_CHECK(full >= 0, path, ": tensor '", p.name, "' has a bad full shape ", shape_str(p.full_shape));
    const bool is_box = !p.box_shape.empty();
    if (is_box) {
      const std::string why = region_outside(p.region(), p.full_shape);
      TITAN_CHECK(why.empty(), path, ": piece of tensor '", p.name, "': ", why);
      TITAN_CHECK(n == shape_numel(p.box_shape), path, ": piece of tensor '", p.name, "' holds ", n,
                  " elements for its ", p.region().str());
    } else {
      TITAN_CHECK(p.offset >= 0 && p.offset <= full && n <= full - p.offset, path, ": piece of tensor '", p.name,
                  "' (elements ", range_str(p.offset, p.offset + n), ") lies outside its full shape ",
                  shape_str(p.full_shape), " (", full, " elements)");
    }
    auto [it, fresh] = seen.try_emplace(p.name);
    Seen& s = it->second;
    if (fresh) {
      s.full_shape = p.full_shape;
      s.dtype = p.data.dtype();
    }
    TITAN_CHECK(s.full_shape == p.full_shape && s.dtype == p.data.dtype(), path, ": pieces of tensor '", p.name,
                "' disagree on dtype or full shape (", dtype_name(s.dtype), shape_str(s.full_shape), " vs ",
                dtype_name(p.data.dtype()), shape_str(p.full_shape), ")");
    const bool whole = (is_box || p.offset == 0) && n == full;
    if (whole) {  // written with its full shape; an empty tensor has one (empty) whole entry
      TITAN_CHECK(!s.whole, path, ": duplicate tensor name '", p.name, "'");
      s.whole = true;
    }
    if (n > 0)
      for (const TensorRun& r : region_runs(p.region(), p.full_shape)) s.ranges.push_back({r.flat, r.len});
    write[i] = whole || n > 0;
    partial[i] = !whole && n > 0;
    boxed[i] = partial[i] && is_box;
  }
  for (auto& [name, s] : seen) check_disjoint(s.ranges, path, name);
  const bool any_piece = std::find(partial.begin(), partial.end(), true) != partial.end();
  const bool any_box = std::find(boxed.begin(), boxed.end(), true) != boxed.end();

  // GPU tensors go through one pinned buffer, sized for the largest of them (at most the bound).
  uint64_t largest_gpu = 0;
  for (size_t i = 0; i < pieces.size(); ++i)
    if (write[i] && pieces[i].data.device().type == DeviceType::CUDA)
      largest_gpu = std::max<uint64_t>(largest_gpu, pieces[i].data.nbytes());
  PinnedStaging staging(largest_gpu);

  Fd f(path);
  f.write(kMagic, 8);
  nlohmann::json index = {
      {"format", "titan-tensors"}, {"version", any_box ? 3 : any_piece ? 2 : 1}, {"tensors", nlohmann::json::array()}};
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!write[i]) continue;
    const TensorPiece& p = pieces[i];
    f.pad_to(kAlign);
    uint64_t off = f.pos(), n = p.data.nbytes();
    uint32_t crc = 0;
    if (p.data.device().type == DeviceType::CUDA) {  // the same bytes and CRC, piece by piece
      staging.from_device(p.data.raw(), n, [&](const char* bytes, uint64_t m, uint64_t) {
        crc = crc32c(bytes, m, crc);
        f.write(bytes, m);
      });
    } else {
      f.write(p.data.raw(), n);
      crc = crc32c(p.data.raw(), n);
    }
    nlohmann::json e = {{"name", p.name},
                        {"dtype", dtype_name(p.data.dtype())},
                        {"shape", boxed[i]     ? p.box_shape
                                  : partial[i] ? Shape{p.data.numel()}
                                               : p.full_shape},
                        {"offset", off},
                        {"nbytes", n},
                        {"crc32c", crc}};
    if (boxed[i]) {
      e["full_shape"] = p.full_shape;
      e["box_offset"] = p.box_offset;
    } else if (partial[i]) {
      e["full_shape"] = p.full_shape;
      e["elem_offset"] = p.offset;
    }
    index["tensors"].push_back(std::move(e));
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

void write_tensor_file(const std::string& path, const std::vector<NamedTensor>& tensors) {
  std::set<std::string> names;
  std::vector<TensorPiece> pieces;
  pieces.reserve(tensors.size());
  for (auto& t : tensors) {
    TITAN_CHECK(names.insert(t.name).second, path, ": duplicate tensor name '", t.name, "'");
    TITAN_CHECK(t.tensor.defined(), path, ": tensor '", t.name, "' is undefined");
    pieces.push_back({t.name, t.tensor.shape(), 0, t.tensor});
  }
  write_tensor_pieces(path, pieces);
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
  std::map<std::string, std::vector<size_t>> by_name;
  try {
    nlohmann::json j = nlohmann::json::parse(idx);
    TITAN_CHECK(j.at("format") == "titan-tensors", path, ": unsupported index format");
    const int64_t version = j.at("version").get<int64_t>();
    TITAN_CHECK(version >= 1 && version <= 3, path, ": unsupported index version ", version,
                " (written by a newer titan?)");
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
      const int64_t numel = checked_numel(t.shape);
      TITAN_CHECK(numel >= 0, path, ": tensor '", t.name, "' has a bad shape");
      // numel <= size keeps the byte count below overflow before it is compared with nbytes.
      TITAN_CHECK(uint64_t(numel) <= size && uint64_t(numel) * dtype_size(t.dtype) == t.nbytes, path, ": tensor '",
                  t.name, "' byte size does not match its shape and dtype");
      t.piece = e.contains("full_shape") || e.contains("elem_offset") || e.contains("box_offset");
      if (t.piece && e.contains("box_offset")) {
        TITAN_CHECK(version == 3, path, ": tensor '", t.name, "' is a box piece in a version ", version,
                    " file (corrupt index)");
        TITAN_CHECK(!e.contains("elem_offset"), path, ": tensor '", t.name, "' has both elem_offset and box_offset");
        t.full_shape = e.at("full_shape").get<Shape>();
        t.box_offset = e.at("box_offset").get<Shape>();
        TITAN_CHECK(checked_numel(t.full_shape) >= 0, path, ": tensor '", t.name, "' has a bad full shape");
        TITAN_CHECK(numel > 0 && !t.box_offset.empty(), path, ": box piece of tensor '", t.name, "' is empty");
        const std::string why = region_outside(t.region(), t.full_shape);
        TITAN_CHECK(why.empty(), path, ": piece of tensor '", t.name, "': ", why, " (corrupt index)");
      } else if (t.piece) {
        TITAN_CHECK(version == 2, path, ": tensor '", t.name, "' is a piece in a version 1 file (corrupt index)");
        t.full_shape = e.at("full_shape").get<Shape>();
        t.elem_offset = e.at("elem_offset").get<int64_t>();
        const int64_t full = checked_numel(t.full_shape);
        TITAN_CHECK(full >= 0, path, ": tensor '", t.name, "' has a bad full shape");
        TITAN_CHECK(t.shape.size() == 1 && numel > 0, path, ": piece of tensor '", t.name,
                    "' must be stored 1-D and non-empty, got shape ", shape_str(t.shape));
        TITAN_CHECK(t.elem_offset >= 0 && t.elem_offset <= full && numel <= full - t.elem_offset, path,
                    ": piece of tensor '", t.name, "' (elements ", range_str(t.elem_offset, t.elem_offset + numel),
                    ") lies outside its full shape ", shape_str(t.full_shape), " (corrupt index)");
      } else {
        t.full_shape = t.shape;
      }
      TITAN_CHECK(t.offset % kAlign == 0 && t.offset >= prev_end && t.offset <= idx_off &&
                      t.nbytes <= idx_off - t.offset,
                  path, ": tensor '", t.name, "' lies outside the data region (corrupt index)");
      prev_end = t.offset + t.nbytes;
      by_name[t.name].push_back(entries_.size());
      first_.try_emplace(t.name, entries_.size());
      entries_.push_back(std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": malformed index: ", e.what());
  }
  for (auto& [name, idxs] : by_name) {
    if (idxs.size() == 1) continue;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    const TensorFileEntry& a = entries_[idxs[0]];
    for (size_t i : idxs) {
      const TensorFileEntry& b = entries_[i];
      TITAN_CHECK(b.piece, path, ": duplicate tensor '", name, "'");
      TITAN_CHECK(b.full_shape == a.full_shape && b.dtype == a.dtype, path, ": pieces of tensor '", name,
                  "' disagree on dtype or full shape (", dtype_name(a.dtype), shape_str(a.full_shape), " vs ",
                  dtype_name(b.dtype), shape_str(b.full_shape), ")");
      for (const TensorRun& r : region_runs(b.region(), b.full_shape)) ranges.push_back({r.flat, r.len});
    }
    check_disjoint(std::move(ranges), path, name);
  }
}

TensorFileReader::~TensorFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

const TensorFileEntry* TensorFileReader::find(const std::string& name) const {
  auto it = first_.find(name);
  return it == first_.end() ? nullptr : &entries_[it->second];
}

void TensorFileReader::read_entry(const TensorFileEntry& e, void* dst) const {
  pread_all(fd_, dst, e.nbytes, e.offset, path_);
  TITAN_CHECK(crc32c(dst, e.nbytes) == e.crc32c, path_, ": tensor '", e.name, "' checksum mismatch (file corrupt)");
}

void TensorFileReader::stream_entry(
    const TensorFileEntry& e, const std::function<void(int64_t, const char*, int64_t)>& sink) const {
  constexpr uint64_t kChunk = uint64_t(4) << 20;  // a multiple of every dtype size
  std::vector<char> buf(size_t(std::min(kChunk, e.nbytes)));
  stream_entry(e, buf.data(), buf.size(), sink);
}

void TensorFileReader::stream_entry(const TensorFileEntry& e, char* buf, uint64_t buf_bytes,
                                    const std::function<void(int64_t, const char*, int64_t)>& sink) const {
  const uint64_t esize = dtype_size(e.dtype);
  const uint64_t chunk = buf_bytes >= e.nbytes ? e.nbytes : buf_bytes / esize * esize;
  TITAN_ASSERT(chunk > 0 || e.nbytes == 0, path_, ": a read buffer of ", buf_bytes, " bytes for ", dtype_name(e.dtype));
  uint32_t crc = 0;
  for (uint64_t done = 0; done < e.nbytes;) {
    const uint64_t n = std::min(chunk, e.nbytes - done);
    pread_all(fd_, buf, n, e.offset + done, path_);
    crc = crc32c(buf, n, crc);
    sink(int64_t(done / esize), buf, int64_t(n / esize));
    done += n;
  }
  TITAN_CHECK(crc == e.crc32c, path_, ": tensor '", e.name, "' checksum mismatch (file corrupt)");
}

const TensorFileEntry& TensorFileReader::whole(const std::string& name) const {
  const TensorFileEntry* e = find(name);
  TITAN_CHECK(e != nullptr, path_, ": no tensor '", name, "'");
  TITAN_CHECK(!e->piece, path_, ": tensor '", name, "' is stored in pieces (",
              e->region().str(), " of ", shape_str(e->full_shape),
              " here); read it through the checkpoint loader");
  return *e;
}

void TensorFileReader::read_into(const std::string& name, Tensor& dst) const {
  const TensorFileEntry& e = whole(name);
  TITAN_CHECK(dst.defined() && dst.dtype() == e.dtype && dst.shape() == e.shape, path_, ": tensor '", name,
              "' is ", dtype_name(e.dtype), shape_str(e.shape), " but the destination is ",
              dst.defined() ? dst.str() : std::string("undefined"));
  if (dst.device().type == DeviceType::CUDA) {  // through a pinned buffer, piece by piece
    PinnedStaging staging(e.nbytes);
    char* d = static_cast<char*>(dst.raw());
    const size_t esize = dtype_size(e.dtype);
    stream_entry(e, staging.data(), staging.size(), [&](int64_t first, const char* bytes, int64_t count) {
      gpu::copy_to_device(d + size_t(first) * esize, bytes, size_t(count) * esize);
    });
    return;
  }
  read_entry(e, dst.raw());
}

Tensor TensorFileReader::read(const std::string& name) const {
  const TensorFileEntry& e = whole(name);
  Tensor t = Tensor::empty(e.shape, e.dtype);
  read_entry(e, t.raw());
  return t;
}

}  // namespace titan
