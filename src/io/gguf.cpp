#include "io/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "io/gguf_quants.h"
#include "util/json_util.h"
#include "util/strings.h"

namespace titan {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian

size_t utf8_error_at(std::string_view s);

// A bounds-checked little-endian cursor over the header.
class Cursor {
 public:
  Cursor(const uint8_t* p, uint64_t n, const std::string& origin) : p_(p), n_(n), origin_(origin) {}
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return n_ - pos_; }
  void need(uint64_t k, const char* what) const {
    TITAN_CHECK(k <= left(), origin_, ": truncated header: ", what, " needs ", k, " bytes at offset ", pos_, " but ",
                left(), " remain");
  }
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  // A string's bytes (a view into the file), checked to be UTF-8.
  std::string_view view(const char* what) {
    const uint64_t len = get<uint64_t>(what);
    TITAN_CHECK(len <= kGgufMaxString, origin_, ": ", what, " has an absurd length ", len, " (limit ", kGgufMaxString, ")");
    need(len, what);
    std::string_view s(reinterpret_cast<const char*>(p_ + pos_), size_t(len));
    const size_t bad = utf8_error_at(s);
    TITAN_CHECK(bad == s.size(), origin_, ": ", what, " at offset ", pos_, " is not valid UTF-8 (byte ", bad, ": ",
                quote(s.substr(0, std::min<size_t>(s.size(), bad + 8)), 40), ")");
    pos_ += len;
    return s;
  }
  std::string str(const char* what) { return std::string(view(what)); }
  std::string_view bytes(uint64_t n) {
    std::string_view s(reinterpret_cast<const char*>(p_ + pos_), size_t(n));
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* p_;
  uint64_t n_, pos_ = 0;
  const std::string& origin_;
};

// Where s stops being UTF-8 (s.size() when it is valid): no overlong forms, no surrogates, nothing
// past U+10FFFF.
size_t utf8_error_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n || p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
    i += len;
  }
  return n;
}

uint64_t min_size(GgufType t) {  // bytes of the smallest encoding of a value of type t
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: case GgufType::STRING: return 8;
    case GgufType::ARRAY: return 12;
  }
  return 1;
}

bool known_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }

GgufValue read_value(Cursor& c, GgufType t, int depth, const std::string& key, const std::string& origin) {
  GgufValue v;
  v.type = t;
  const char* what = "a metadata value";
  switch (t) {
    case GgufType::U8: v.i = c.get<uint8_t>(what); break;
    case GgufType::I8: v.i = c.get<int8_t>(what); break;
    case GgufType::U16: v.i = c.get<uint16_t>(what); break;
    case GgufType::I16: v.i = c.get<int16_t>(what); break;
    case GgufType::U32: v.i = c.get<uint32_t>(what); break;
    case GgufType::I32: v.i = c.get<int32_t>(what); break;
    case GgufType::I64: v.i = c.get<int64_t>(what); break;
    case GgufType::U64: {
      const uint64_t u = c.get<uint64_t>(what);
      TITAN_CHECK(u <= uint64_t(std::numeric_limits<int64_t>::max()), origin, ": metadata ", quote(key), ": u64 value ",
                  u, " is out of range");
      v.i = int64_t(u);
      break;
    }
    case GgufType::F32: v.f = c.get<float>(what); break;
    case GgufType::F64: v.f = c.get<double>(what); break;
    case GgufType::BOOL: {
      const uint8_t b = c.get<uint8_t>(what);
      TITAN_CHECK(b <= 1, origin, ": metadata ", quote(key), ": bool value ", int(b), " is neither 0 nor 1");
      v.i = b;
      break;
    }
    case GgufType::STRING: v.s = c.str("a metadata string"); break;
    case GgufType::ARRAY: {
      TITAN_CHECK(depth < int(kGgufMaxDepth), origin, ": metadata ", quote(key), ": arrays nested deeper than ",
                  kGgufMaxDepth);
      const uint32_t et = c.get<uint32_t>("an array type");
      TITAN_CHECK(known_type(et), origin, ": metadata ", quote(key), ": unknown array element type ", et);
      const uint64_t n = c.get<uint64_t>("an array length");
      TITAN_CHECK(n <= kGgufMaxArray, origin, ": metadata ", quote(key), ": array length ", n, " exceeds ", kGgufMaxArray);
      v.elem = GgufType(et);
      v.count = n;
      TITAN_CHECK(n <= c.left() / min_size(v.elem), origin, ": metadata ", quote(key), ": array of ", n,
                  " elements is longer than the rest of the file");
      if (v.elem == GgufType::STRING) {
        v.strs.reserve(size_t(n));
        for (uint64_t k = 0; k < n; ++k) v.strs.push_back(c.view("a metadata string"));
      } else if (v.elem == GgufType::ARRAY) {
        TITAN_CHECK(n <= kGgufMaxNestedArray, origin, ": metadata ", quote(key), ": array of ", n,
                    " arrays exceeds ", kGgufMaxNestedArray);
        v.arr.reserve(size_t(n));
        for (uint64_t k = 0; k < n; ++k) v.arr.push_back(read_value(c, v.elem, depth + 1, key, origin));
      } else {  // numbers and bools stay in the file's bytes; checked here as a scalar would be
        const uint64_t w = min_size(v.elem);
        v.raw = c.bytes(n * w);
        for (uint64_t k = 0; k < n; ++k) {
          if (v.elem == GgufType::BOOL)
            TITAN_CHECK(uint8_t(v.raw[k]) <= 1, origin, ": metadata ", quote(key), ": bool element ", k, " is neither 0 nor 1");
          if (v.elem == GgufType::U64) {
            uint64_t u;
            std::memcpy(&u, v.raw.data() + k * 8, 8);
            TITAN_CHECK(u <= uint64_t(std::numeric_limits<int64_t>::max()), origin, ": metadata ", quote(key),
                        ": u64 element ", k, " (", u, ") is out of range");
          }
        }
      }
      break;
    }
  }
  return v;
}

struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr && addr != MAP_FAILED) ::munmap(addr, size);
  }
};

}  // namespace

const char* gguf_type_name(GgufType t) {
  static const char* names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
  return known_type(uint32_t(t)) ? names[uint32_t(t)] : "?";
}

int64_t GgufValue::int_at(size_t k) const {
  const char* p = raw.data() + k * min_size(elem);
  auto get = [p](auto v) {
    std::memcpy(&v, p, sizeof(v));
    return int64_t(v);
  };
  switch (elem) {
    case GgufType::U8: case GgufType::BOOL: return get(uint8_t{});
    case GgufType::I8: return get(int8_t{});
    case GgufType::U16: return get(uint16_t{});
    case GgufType::I16: return get(int16_t{});
    case GgufType::U32: return get(uint32_t{});
    case GgufType::I32: return get(int32_t{});
    case GgufType::U64: return get(uint64_t{});  // validated <= INT64_MAX
    case GgufType::I64: return get(int64_t{});
    default: fail("GgufValue::int_at on an array of ", gguf_type_name(elem));
  }
}

double GgufValue::number_at(size_t k) const {
  const char* p = raw.data() + k * min_size(elem);
  if (elem == GgufType::F32) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (elem == GgufType::F64) {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  return double(int_at(k));
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16: case GgufType::U32:
    case GgufType::I32: case GgufType::U64: case GgufType::I64: return true;
    default: return false;
  }
}

GgufFile GgufFile::open(const std::string& path) {
  check_regular_file(path);  // a named pipe would block open() for ever
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  TITAN_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": is not a regular file");
  }
  auto map = std::make_shared<Mapping>();
  map->size = size_t(st.st_size);
  if (map->size < 24) {
    ::close(fd);
    fail(path, ": not a GGUF file: ", map->size, " bytes, shorter than the 24-byte header");
  }
  map->addr = ::mmap(nullptr, map->size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  TITAN_CHECK(map->addr != MAP_FAILED, path, ": mmap failed: ", std::strerror(e));
  return from_memory(map->addr, map->size, map, path);
}

GgufFile GgufFile::from_memory(const void* data, size_t size, std::shared_ptr<void> keepalive, const std::string& origin) {
  GgufFile f;
  f.origin_ = origin;
  f.keepalive_ = std::move(keepalive);
  const auto* bytes = static_cast<const uint8_t*>(data);
  Cursor c(bytes, size, f.origin_);
  TITAN_CHECK(size >= 24 && c.get<uint32_t>("the magic") == kMagic, origin, ": not a GGUF file (no \"GGUF\" magic)");
  f.version_ = c.get<uint32_t>("the version");
  TITAN_CHECK(f.version_ == 2 || f.version_ == 3, origin, ": GGUF version ", f.version_, " is not supported (2 or 3)");
  const uint64_t n_tensors = c.get<uint64_t>("the tensor count"), n_kv = c.get<uint64_t>("the metadata count");
  TITAN_CHECK(n_kv <= kGgufMaxKv, origin, ": metadata count ", n_kv, " exceeds ", kGgufMaxKv);
  TITAN_CHECK(n_tensors <= kGgufMaxTensors, origin, ": tensor count ", n_tensors, " exceeds ", kGgufMaxTensors);
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.str("a metadata key");
    TITAN_CHECK(!key.empty(), origin, ": metadata key ", k, " is empty");
    const uint32_t t = c.get<uint32_t>("a metadata type");
    TITAN_CHECK(known_type(t), origin, ": metadata ", quote(key, 60), " has an unknown value type ", t);
    GgufValue v = read_value(c, GgufType(t), 0, key, origin);
    TITAN_CHECK(f.kv_.emplace(key, std::move(v)).second, origin, ": metadata key ", quote(key, 60),
                " appears twice");
  }
  if (const GgufValue* a = f.find("general.alignment")) {
    TITAN_CHECK(a->is_integer() && a->i > 0 && a->i <= (1 << 20) && (a->i & (a->i - 1)) == 0, origin,
                ": general.alignment must be a power of two up to 2^20");
    f.alignment_ = uint64_t(a->i);
  }
  f.tensors_.reserve(size_t(std::min<uint64_t>(n_tensors, c.left() / 24)));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    t.name = c.str("a tensor name");
    const std::string nm = quote(t.name, 80);
    const uint32_t nd = c.get<uint32_t>("a tensor's dimension count");
    TITAN_CHECK(nd >= 1 && nd <= kGgufMaxDims, origin, ": tensor ", nm, " has ", nd, " dimensions (1 to ", kGgufMaxDims,
                " supported)");
    t.numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t ne = c.get<uint64_t>("a tensor dimension");
      // The product is checked by division: numel * ne could wrap past 2^64 (and then overflow
      // numel, a found by the fuzzer).
      TITAN_CHECK(ne >= 1 && ne <= (uint64_t(1) << 40) / uint64_t(t.numel), origin, ": tensor ", nm, " has an absurd shape");
      t.ne.push_back(int64_t(ne));
      t.numel *= int64_t(ne);
    }
    t.type = c.get<uint32_t>("a tensor type");
    const GgmlTypeInfo* ti = ggml_type_info(t.type);
    TITAN_CHECK(ti, origin, ": tensor ", nm, " has an unknown ggml type ", t.type);
    TITAN_CHECK(t.ne[0] % ti->block == 0, origin, ": tensor ", nm, " (", ti->name, ") has a row of ", t.ne[0],
                " elements, not a whole number of ", ti->block, "-element blocks");
    t.nbytes = uint64_t(t.numel / ti->block) * uint64_t(ti->type_size);
    t.offset = c.get<uint64_t>("a tensor offset");
    TITAN_CHECK(t.offset % f.alignment_ == 0, origin, ": tensor ", nm, " offset ", t.offset,
                " is not a multiple of the alignment ", f.alignment_);
    TITAN_CHECK(f.tensor_index_.emplace(t.name, f.tensors_.size()).second, origin, ": tensor ", nm, " appears twice");
    f.tensors_.push_back(std::move(t));
  }
  const uint64_t data_start = (c.pos() + f.alignment_ - 1) / f.alignment_ * f.alignment_;
  TITAN_CHECK(data_start <= size, origin, ": data section starts at ", data_start, ", past the end of the file (", size,
              " bytes)");
  f.data_ = bytes + data_start;
  f.data_size_ = size - data_start;
  // Inside the data section and not overlapping (sorted by offset).
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : f.tensors_) {
    TITAN_CHECK(t.offset <= f.data_size_ && t.nbytes <= f.data_size_ - t.offset, origin, ": tensor ",
                quote(t.name, 80), " (bytes ", t.offset, "..", t.offset + t.nbytes,
                " of the data section) lies outside the file (data section of ", f.data_size_, " bytes)");
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k)
    TITAN_CHECK(by_offset[k - 1]->offset + by_offset[k - 1]->nbytes <= by_offset[k]->offset, origin, ": tensors ",
                quote(by_offset[k - 1]->name, 60), " and ", quote(by_offset[k]->name, 60), " overlap");
  return f;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::string_view GgufFile::bytes(const GgufTensorInfo& t) const {
  return {reinterpret_cast<const char*>(data_ + t.offset), size_t(t.nbytes)};
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::optional<int64_t> GgufFile::integer(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  TITAN_CHECK(v->is_integer(), origin_, ": metadata ", quote(key), " must be an integer, got ", gguf_type_name(v->type));
  return v->i;
}

std::optional<double> GgufFile::number(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  if (v->is_integer()) return double(v->i);
  TITAN_CHECK(v->type == GgufType::F32 || v->type == GgufType::F64, origin_, ": metadata ", quote(key),
              " must be a number, got ", gguf_type_name(v->type));
  TITAN_CHECK(std::isfinite(v->f), origin_, ": metadata ", quote(key), " is not finite");
  return v->f;
}

std::optional<std::string> GgufFile::string(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  TITAN_CHECK(v->type == GgufType::STRING, origin_, ": metadata ", quote(key), " must be a string, got ",
              gguf_type_name(v->type));
  return v->s;
}

std::optional<bool> GgufFile::boolean(const std::string& key) const {
  const GgufValue* v = find(key);
  if (!v) return std::nullopt;
  TITAN_CHECK(v->type == GgufType::BOOL, origin_, ": metadata ", quote(key), " must be a bool, got ",
              gguf_type_name(v->type));
  return v->i != 0;
}

const GgufValue* GgufFile::array(const std::string& key, GgufType elem) const {
  const GgufValue* v = find(key);
  if (!v) return nullptr;
  GgufValue probe;
  probe.type = v->elem;
  const bool ok = v->type == GgufType::ARRAY &&
                  (v->elem == elem || (probe.is_integer() && (elem == GgufType::I32 || elem == GgufType::I64)));
  TITAN_CHECK(ok, origin_, ": metadata ", quote(key), " must be an array of ", gguf_type_name(elem), ", got ",
              v->type == GgufType::ARRAY ? std::string("an array of ") + gguf_type_name(v->elem)
                                         : std::string(gguf_type_name(v->type)));
  return v;
}

int64_t GgufFile::required_integer(const std::string& key) const {
  auto v = integer(key);
  TITAN_CHECK(v.has_value(), origin_, ": missing metadata ", quote(key));
  return *v;
}

std::string GgufFile::required_string(const std::string& key) const {
  auto v = string(key);
  TITAN_CHECK(v.has_value(), origin_, ": missing metadata ", quote(key));
  return *v;
}

}  // namespace titan
