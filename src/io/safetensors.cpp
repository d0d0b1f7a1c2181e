#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/pinned_staging.h"
#include "io/file_writer.h"
#include "util/json_util.h"
#include "util/strings.h"

namespace titan {

using nlohmann::json;

namespace {

struct FileDType {
  const char* name;
  size_t bytes;
  bool has_dtype;  // representable as a titan DType
  DType dtype;
};

// Every byte-sized dtype of the format. Sub-byte ones (F4, F6_*) are refused as unsupported.
const FileDType kFileDTypes[] = {
    {"F32", 4, true, DType::F32},  {"BF16", 2, true, DType::BF16}, {"F16", 2, true, DType::F16},
    {"I32", 4, true, DType::I32},  {"I64", 8, true, DType::I64},   {"F64", 8, false, DType::F32},
    {"U64", 8, false, DType::F32}, {"U32", 4, false, DType::F32},  {"I16", 2, false, DType::F32},
    {"U16", 2, false, DType::F32}, {"I8", 1, false, DType::F32},   {"U8", 1, false, DType::F32},
    {"BOOL", 1, false, DType::F32}, {"F8_E4M3", 1, false, DType::F32}, {"F8_E5M2", 1, false, DType::F32},
    {"F8_E8M0", 1, false, DType::F32}, {"C64", 8, false, DType::F32},
};

const FileDType* file_dtype(const std::string& s) {
  for (const auto& d : kFileDTypes)
    if (s == d.name) return &d;
  return nullptr;
}

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// Owns a private read-write mapping of a whole file (copy-on-write: the file is never modified).
struct Mapping {
  void* addr = MAP_FAILED;
  size_t size = 0;
  ~Mapping() {
    if (addr != MAP_FAILED) ::munmap(addr, size);
  }
};

// Non-negative integer from a JSON value, or fail with `what`.
uint64_t to_u64(const json& v, const std::string& origin, const std::string& what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
  fail(origin, ": ", what, " must hold non-negative integers, got ", printable(v.dump(), 40));
}

// Converts n elements in parallel chunks (conversion of a multi-GB checkpoint is memory-bound).
void convert_parallel(const void* src, DType st, void* dst, DType dt, size_t n) {
  const size_t chunk = size_t(1) << 16;
  const int64_t chunks = int64_t((n + chunk - 1) / chunk);
  const size_t ss = dtype_size(st), ds = dtype_size(dt);
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (int64_t c = 0; c < chunks; ++c) {
    size_t b = size_t(c) * chunk, e = std::min(n, b + chunk);
    convert_floats(static_cast<const char*>(src) + b * ss, st, static_cast<char*>(dst) + b * ds, dt, e - b);
  }
}

}  // namespace

const char* safetensors_dtype_name(DType dt) {
  for (const auto& d : kFileDTypes)
    if (d.has_dtype && d.dtype == dt) return d.name;
  return "?";
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  check_regular_file(path);  // a named pipe would block open() for ever
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  TITAN_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* why = not_a_file_reason(st.st_mode);
    fail(path, ": ", why ? why : "is not a regular file");
  }
  auto map = std::make_shared<Mapping>();
  map->size = size_t(st.st_size);
  if (map->size >= 8) {
    map->addr = ::mmap(nullptr, map->size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    int e = errno;
    ::close(fd);
    TITAN_CHECK(map->addr != MAP_FAILED, path, ": mmap failed: ", std::strerror(e));
    SafetensorsFile f = from_memory(map->addr, map->size, map, path);
    f.mapped_ = true;
    return f;
  }
  ::close(fd);
  static const uint8_t none[1] = {0};
  return from_memory(none, map->size, nullptr, path);  // fails: shorter than 8 bytes
}

SafetensorsFile SafetensorsFile::from_memory(const void* data, size_t size, std::shared_ptr<void> keepalive,
                                             const std::string& origin) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  TITAN_CHECK(size >= 8, origin, ": not a safetensors file: ", size, " bytes, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | bytes[i];  // little-endian u64
  TITAN_CHECK(n <= kSafetensorsMaxHeader, origin, ": header length ", n, " is absurd (limit ", kSafetensorsMaxHeader,
              " bytes)");
  TITAN_CHECK(n <= size - 8, origin, ": header length ", n, " goes beyond the end of the file (", size, " bytes)");

  SafetensorsFile f;
  f.origin_ = origin;
  f.keepalive_ = std::move(keepalive);
  f.data_ = bytes + 8 + n;
  f.data_size_ = size - 8 - n;

  json header = parse_json_strict(std::string_view(reinterpret_cast<const char*>(bytes + 8), size_t(n)), origin + ": header");
  TITAN_CHECK(header.is_object(), origin, ": header is not a JSON object (got ", json_kind(header), ")");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      TITAN_CHECK(v.is_object(), origin, ": __metadata__ must be an object mapping strings to strings, got ", json_kind(v));
      for (auto m = v.begin(); m != v.end(); ++m) {
        TITAN_CHECK(m->is_string(), origin, ": __metadata__ must map strings to strings (", quote(m.key()), " is ",
                    json_kind(*m), ")");
        f.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor " + quote(name);
    TITAN_CHECK(!name.empty(), origin, ": tensor with an empty name");
    TITAN_CHECK(v.is_object(), origin, ": ", what, ": entry is not an object (got ", json_kind(v), ")");
    for (const char* key : {"dtype", "shape", "data_offsets"})
      TITAN_CHECK(v.contains(key), origin, ": ", what, ": missing \"", key, "\"");
    for (auto k = v.begin(); k != v.end(); ++k)
      TITAN_CHECK(k.key() == "dtype" || k.key() == "shape" || k.key() == "data_offsets", origin, ": ", what,
                  ": unexpected field ", quote(k.key()));

    SafetensorsEntry e;
    e.name = name;
    const json& dt = v["dtype"];
    TITAN_CHECK(dt.is_string(), origin, ": ", what, ": dtype must be a string, got ", json_kind(dt));
    e.dtype = dt.get<std::string>();
    const FileDType* fdt = file_dtype(e.dtype);
    TITAN_CHECK(fdt, origin, ": ", what, ": unknown dtype ", quote(e.dtype));

    const json& shape = v["shape"];
    TITAN_CHECK(shape.is_array(), origin, ": ", what, ": shape must be a list, got ", json_kind(shape));
    uint64_t nbytes = fdt->bytes;
    bool overflow = false;
    for (const auto& d : shape) {
      uint64_t x = to_u64(d, origin, what + " shape");
      TITAN_CHECK(x <= uint64_t(INT64_MAX), origin, ": ", what, ": dimension ", x, " is too large");
      e.shape.push_back(int64_t(x));
      overflow |= __builtin_mul_overflow(nbytes, x, &nbytes);
    }
    TITAN_CHECK(!overflow, origin, ": ", what, ": shape ", shape_str(e.shape), " is too large");

    const json& off = v["data_offsets"];
    TITAN_CHECK(off.is_array() && off.size() == 2, origin, ": ", what, ": data_offsets must be a list [begin, end], got ",
                printable(off.dump(), 60));
    e.begin = to_u64(off[0], origin, what + " data_offsets");
    e.end = to_u64(off[1], origin, what + " data_offsets");
    TITAN_CHECK(e.begin <= e.end, origin, ": ", what, ": data_offsets [", e.begin, ", ", e.end, "] are reversed");
    TITAN_CHECK(e.end <= f.data_size_, origin, ": ", what, ": data_offsets [", e.begin, ", ", e.end,
                "] go beyond the end of the file (data section is ", f.data_size_, " bytes)");
    TITAN_CHECK(e.end - e.begin == nbytes, origin, ": ", what, ": shape ", shape_str(e.shape), " of ", e.dtype, " needs ",
                nbytes, " bytes but data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin);
    f.entries_.push_back(std::move(e));
  }

  // The tensors must tile the data section: sorted by offset, each starts where the last ended.
  std::sort(f.entries_.begin(), f.entries_.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t cursor = 0;
  const SafetensorsEntry* prev = nullptr;
  for (const auto& e : f.entries_) {
    if (e.begin < cursor)
      fail(origin, ": tensor ", quote(e.name), " (bytes [", e.begin, ", ", e.end, ")) overlaps tensor ",
           quote(prev->name), " (bytes [", prev->begin, ", ", prev->end, "))");
    if (e.begin > cursor) {
      if (!prev) fail(origin, ": data section does not start at offset 0: first tensor ", quote(e.name), " begins at ", e.begin);
      fail(origin, ": data_offsets are not contiguous: ", e.begin - cursor, " unused bytes between tensor ",
           quote(prev->name), " and tensor ", quote(e.name));
    }
    cursor = e.end;
    prev = &e;
  }
  TITAN_CHECK(cursor == f.data_size_, origin, ": the tensors cover ", cursor, " bytes but the data section has ",
              f.data_size_, " (", f.data_size_ - cursor, " trailing bytes belong to no tensor)");
  for (size_t i = 0; i < f.entries_.size(); ++i) f.index_[f.entries_[i].name] = i;
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  TITAN_CHECK(e, origin_, ": no tensor ", quote(name));
  return *e;
}

std::string_view SafetensorsFile::bytes(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  return std::string_view(reinterpret_cast<const char*>(data_ + e.begin), size_t(e.end - e.begin));
}

DType SafetensorsFile::dtype(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  const FileDType* fdt = file_dtype(e.dtype);
  TITAN_CHECK(fdt && fdt->has_dtype, origin_, ": tensor ", quote(name), " has dtype ", e.dtype,
              ", which titan cannot load (F32, BF16, F16, I32, I64)");
  return fdt->dtype;
}

Tensor SafetensorsFile::get(const std::string& name, DType dt) const {
  const SafetensorsEntry& e = entry(name);
  const DType st = dtype(name);
  void* src = const_cast<uint8_t*>(data_ + e.begin);  // writable: private mapping or caller's buffer
  const bool aligned = reinterpret_cast<uintptr_t>(src) % dtype_size(st) == 0;
  if (st == dt && aligned) return Tensor::borrow(src, e.shape, dt, keepalive_);
  TITAN_CHECK(st == dt || (is_float(st) && is_float(dt)), origin_, ": tensor ", quote(name), " is ", e.dtype,
              " and cannot be converted to ", dtype_name(dt));
  Tensor out = Tensor::empty(e.shape, dt);
  read_into(name, out);
  return out;
}

void SafetensorsFile::drop_pages(const std::string& name) const {
  if (!mapped_) return;
  const SafetensorsEntry& e = entry(name);
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(data_ + e.begin) + page - 1) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(data_ + e.end) / page * page;
  if (end > b) ::madvise(reinterpret_cast<void*>(b), end - b, MADV_DONTNEED);  // advice: failure changes nothing
}

void SafetensorsFile::prefault(const std::string& name) const {
  if (!mapped_) return;
  const SafetensorsEntry& e = entry(name);
  if (e.end == e.begin) return;
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(data_ + e.begin) / page * page;
  const uintptr_t end = reinterpret_cast<uintptr_t>(data_ + e.end);
#ifdef MADV_POPULATE_READ
  if (::madvise(reinterpret_cast<void*>(b), end - b, MADV_POPULATE_READ) == 0) return;
#endif
  // Kernels before 5.14: one read per page does the same.
  volatile uint8_t sink = 0;
  for (uintptr_t p = std::max(b, reinterpret_cast<uintptr_t>(data_ + e.begin)); p < end; p += page)
    sink = sink ^ *reinterpret_cast<const uint8_t*>(p);
}

void SafetensorsFile::read_into(const std::string& name, Tensor& dst, PinnedStaging* staging) const {
  const SafetensorsEntry& e = entry(name);
  const DType st = dtype(name);
  TITAN_CHECK(dst.shape() == e.shape, origin_, ": tensor ", quote(name), " has shape ", shape_str(e.shape), ", expected ",
              shape_str(dst.shape()));
  TITAN_CHECK(st == dst.dtype() || (is_float(st) && is_float(dst.dtype())), origin_, ": tensor ", quote(name), " is ",
              e.dtype, " and cannot be converted to ", dtype_name(dst.dtype()));
  const uint8_t* src = data_ + e.begin;
  const size_t n = size_t(dst.numel());
  if (n == 0) return;
  if (dst.device().type == DeviceType::CUDA) {
    // Chunks of the destination's bytes: copied (or converted, from any byte offset: the source
    // bytes of a chunk are copied out first when misaligned) into the pinned buffer, then over.
    PinnedStaging own;
    PinnedStaging& buf = staging ? *staging : own;
    const size_t se = dtype_size(st), de = dtype_size(dst.dtype());
    const bool aligned = reinterpret_cast<uintptr_t>(src) % se == 0;
    std::vector<char> realign;
    buf.to_device(
        dst.raw(), n * de,
        [&](char* chunk, uint64_t bytes, uint64_t at) {
          const size_t first = size_t(at / de), m = size_t(bytes / de);
          const uint8_t* from = src + first * se;
          if (st == dst.dtype()) {
            std::memcpy(chunk, from, bytes);
            return;
          }
          if (!aligned) {
            realign.resize(m * se);
            std::memcpy(realign.data(), from, m * se);
            from = reinterpret_cast<const uint8_t*>(realign.data());
          }
          convert_parallel(from, st, chunk, dst.dtype(), m);
        },
        de);
    return;
  }
  if (st == dst.dtype()) {
    std::memcpy(dst.raw(), src, n * dtype_size(st));
    return;
  }
  if (reinterpret_cast<uintptr_t>(src) % dtype_size(st) != 0) {
    // A tensor at an odd offset (legal in the format): realign before reading it as typed values.
    Tensor tmp = Tensor::empty(e.shape, st);
    std::memcpy(tmp.raw(), src, n * dtype_size(st));
    convert_parallel(tmp.raw(), st, dst.raw(), dst.dtype(), n);
    return;
  }
  convert_parallel(src, st, dst.raw(), dst.dtype(), n);
}

namespace {

// The source tensor can be stored as dtype dt (undefined, off-CPU and non-convertible refused).
void check_source(const std::string& path, const std::string& name, const Tensor& t, DType dt) {
  TITAN_CHECK(t.defined(), path, ": tensor ", quote(name), " is undefined");
  TITAN_CHECK(t.device().type == DeviceType::CPU || t.device() == (Device{DeviceType::CUDA, 0}), path, ": tensor ",
              quote(name), " is on ", t.device().str(), ", neither the CPU nor cuda:0");
  TITAN_CHECK(dt == t.dtype() || (is_float(dt) && is_float(t.dtype())), path, ": tensor ", quote(name), " is ",
              dtype_name(t.dtype()), " and cannot be written as ", dtype_name(dt));
}

}  // namespace

SafetensorsStreamWriter::SafetensorsStreamWriter(const std::string& path, const std::vector<SafetensorsSpec>& tensors,
                                                 const std::map<std::string, std::string>& metadata)
    : path_(path) {
  std::vector<const SafetensorsSpec*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(),
            [](const SafetensorsSpec* a, const SafetensorsSpec* b) { return a->name < b->name; });

  json header = json::object();
  json meta = json::object();
  meta["format"] = "pt";
  for (const auto& [k, v] : metadata) meta[k] = v;
  header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    const SafetensorsSpec& t = *order[i];
    TITAN_CHECK(!t.name.empty() && t.name != "__metadata__", path, ": invalid tensor name ", quote(t.name));
    TITAN_CHECK(i == 0 || order[i - 1]->name != t.name, path, ": tensor name ", quote(t.name), " given twice");
    for (int64_t d : t.shape)
      TITAN_CHECK(d >= 0, path, ": tensor ", quote(t.name), " has a negative dimension in ", shape_str(t.shape));
    uint64_t bytes = 0;
    try {
      bytes = shape_nbytes(t.shape, t.dtype);
    } catch (const Error& e) {
      fail(path, ": tensor ", quote(t.name), ": ", e.what());
    }
    TITAN_CHECK(bytes <= uint64_t(INT64_MAX) - offset, path, ": the tensors need more than 2^63 bytes");
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    slots_[t.name] = Slot{t.dtype, t.shape, offset, false};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // pad so the data section starts 8-byte aligned
  const uint64_t data_start = 8 + uint64_t(text.size());
  for (auto& [name, slot] : slots_) slot.offset += data_start;
  file_size_ = data_start + offset;
  remaining_ = slots_.size();

  file_ = std::make_unique<FileWriter>(path);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  file_->write(len, 8);
  file_->write(text.data(), text.size());
}

SafetensorsStreamWriter::~SafetensorsStreamWriter() = default;

void SafetensorsStreamWriter::write(const std::string& name, const Tensor& t) {
  TITAN_ASSERT(file_, "SafetensorsStreamWriter::write after commit");
  auto it = slots_.find(name);
  TITAN_CHECK(it != slots_.end(), path_, ": tensor ", quote(name), " is not in the file's layout");
  Slot& slot = it->second;
  TITAN_CHECK(!slot.written, path_, ": tensor ", quote(name), " written twice");
  check_source(path_, name, t, slot.dtype);
  TITAN_CHECK(t.shape() == slot.shape, path_, ": tensor ", quote(name), " has shape ", shape_str(t.shape()),
              ", the layout says ", shape_str(slot.shape));
  const size_t n = size_t(t.numel());
  const DType dt = slot.dtype;
  if (n > 0 && t.device().type == DeviceType::CUDA) {  // through the pinned buffer, chunk by chunk
    const size_t se = dtype_size(t.dtype()), de = dtype_size(dt);
    if (!staging_) staging_ = std::make_unique<PinnedStaging>();
    std::vector<char> conv;
    staging_->from_device(
        t.raw(), n * se,
        [&](const char* chunk, uint64_t bytes, uint64_t at) {
          if (dt == t.dtype()) {
            file_->write_at(slot.offset + at, chunk, bytes);
            return;
          }
          const size_t m = size_t(bytes / se);
          conv.resize(m * de);
          convert_parallel(chunk, t.dtype(), conv.data(), dt, m);
          file_->write_at(slot.offset + at / se * de, conv.data(), m * de);
        },
        se);
  } else if (n > 0 && dt == t.dtype()) {
    file_->write_at(slot.offset, t.raw(), n * dtype_size(dt));
  } else if (n > 0) {
    const size_t chunk = size_t(1) << 20;  // elements converted per write
    std::vector<char> buf(std::min(n, chunk) * dtype_size(dt));
    for (size_t b = 0; b < n; b += chunk) {
      const size_t m = std::min(chunk, n - b);
      convert_parallel(static_cast<const char*>(t.raw()) + b * dtype_size(t.dtype()), t.dtype(), buf.data(), dt, m);
      file_->write_at(slot.offset + b * dtype_size(dt), buf.data(), m * dtype_size(dt));
    }
  }
  slot.written = true;
  --remaining_;
}

void SafetensorsStreamWriter::commit() {
  TITAN_ASSERT(file_, "SafetensorsStreamWriter::commit twice");
  if (remaining_ > 0) {
    std::string missing;
    for (const auto& [name, slot] : slots_)
      if (!slot.written && missing.empty()) missing = quote(name);
    fail(path_, ": ", remaining_, " tensor(s) never written (first: ", missing, ")");
  }
  file_->commit();
  file_.reset();
  staging_.reset();
}

void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors, std::optional<DType> as,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsSpec> specs;
  for (const auto& t : tensors) {
    const DType dt = t.tensor.defined() ? as.value_or(t.tensor.dtype()) : DType::F32;
    check_source(path, t.name, t.tensor, dt);
    specs.push_back({t.name, dt, t.tensor.shape()});
  }
  SafetensorsStreamWriter w(path, specs, metadata);
  std::vector<const NamedTensor*> order;  // name order: the data section fills front to back
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const NamedTensor* a, const NamedTensor* b) { return a->name < b->name; });
  for (const NamedTensor* t : order) w.write(t->name, t->tensor);
  w.commit();
}

}  // namespace titan
