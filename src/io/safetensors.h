// The safetensors format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length N, N bytes of JSON header {"name": {"dtype", "shape", "data_offsets": [b, e]}, ...,
// "__metadata__": {string: string}}, then the data section, where each tensor occupies bytes
// [b, e) (row-major, little-endian) and the tensors tile the section exactly.
//
// Reading memory-maps the file privately (copy-on-write: writing to a borrowed tensor never
// touches the file) and validates the whole header before any tensor is handed out. Tensors
// stored in the requested dtype are returned zero-copy, borrowing the mapping; others are
// converted into owned tensors (f32 <-> bf16 <-> f16). A file truncated by another process while
// mapped can still fault on access; that is outside what validation can see.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace titan {

// Largest header accepted (the reference implementation's limit too): 100 MB.
constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as in the file: "F32", "BF16", "F16", "I32", "I64", "F64", "U8", ...
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range inside the data section
};

class PinnedStaging;

class SafetensorsFile {
 public:
  // Maps and validates `path`; every error is one line naming the file and the reason.
  static SafetensorsFile open(const std::string& path);
  // Validates an image already in memory (the fuzzing entry point). `keepalive` owns the bytes;
  // zero-copy tensors point into them, so they must be writable if a caller writes such tensors.
  static SafetensorsFile from_memory(const void* data, size_t size, std::shared_ptr<void> keepalive,
                                     const std::string& origin);

  const std::string& origin() const { return origin_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // in data order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsEntry* find(const std::string& name) const;  // nullptr when absent
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  size_t size() const { return entries_.size(); }

  // The stored dtype of `name` as a titan DType (error for F64, U8, ... which titan cannot hold).
  DType dtype(const std::string& name) const;
  // Tensor `name` in dtype dt: zero-copy when stored in dt (and aligned for it), otherwise an owned
  // converted copy. Floating types convert among themselves; integer types only load as themselves.
  Tensor get(const std::string& name, DType dt) const;
  Tensor get(const std::string& name) const { return get(name, dtype(name)); }
  // Copies (converting) tensor `name` into dst; dst's shape must equal the stored shape. A dst on
  // cuda:0 is filled through pinned staging (converted on the host chunk by chunk): `staging`, or
  // a buffer of this call's own when null (a loader of many tensors passes one for them all).
  void read_into(const std::string& name, Tensor& dst, PinnedStaging* staging = nullptr) const;
  // The stored bytes of tensor `name` (valid while this object or a tensor from it lives).
  std::string_view bytes(const std::string& name) const;
  // After a copy of `name` has been taken: gives the file pages lying wholly inside its bytes
  // back to the kernel (they are read again from the file if touched), so a loader that copies
  // does not hold the file and the copy at once. Only for a file this object mapped (open());
  // nothing for caller memory. The bytes must not have been written through a zero-copy tensor.
  void drop_pages(const std::string& name) const;
  // Maps the file pages of `name` into this process now (they are read from the page cache or
  // the disk here rather than on first use), for a zero-copy tensor that will be used soon: a
  // model's first forward then runs at its steady speed. Nothing for caller memory.
  void prefault(const std::string& name) const;

 private:
  const SafetensorsEntry& entry(const std::string& name) const;

  std::string origin_;
  const uint8_t* data_ = nullptr;  // start of the data section
  uint64_t data_size_ = 0;
  std::shared_ptr<void> keepalive_;
  bool mapped_ = false;  // data_ lies in a mapping made by open()
  std::vector<SafetensorsEntry> entries_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Writes a spec-conformant file atomically (temporary file in the same folder, streamed, fsync,
// rename, fsync of the folder): header padded with spaces to a multiple of 8 bytes, __metadata__
// {"format": "pt"} plus `metadata`, tensors in name order, data contiguous. With `as`, floating
// tensors are converted to that dtype while streaming. Names must be unique and non-empty.
// (A SafetensorsStreamWriter given the same names, dtypes and shapes writes the same bytes.)
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      std::optional<DType> as = std::nullopt,
                      const std::map<std::string, std::string>& metadata = {});

// One tensor of a file whose layout is fixed before its data exists.
struct SafetensorsSpec {
  std::string name;
  DType dtype = DType::F32;  // as stored in the file
  Shape shape;
};

class FileWriter;

// A safetensors file written as its tensors become available, in any order, holding none of them:
// the layout (header, offsets) follows from the specs alone and is the one save_safetensors
// gives the same tensors (name order, padded header), so the bytes are identical. The constructor
// writes the header into a temporary file next to `path`; write() converts one tensor to its
// declared dtype in bounded chunks and places it at its offset; commit() requires every tensor
// to have been written, then fsyncs and renames (FileWriter). Destroyed without commit(), the
// temporary file is removed and `path` is untouched.
class SafetensorsStreamWriter {
 public:
  SafetensorsStreamWriter(const std::string& path, const std::vector<SafetensorsSpec>& tensors,
                          const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsStreamWriter();
  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;

  // `t` must have the spec's shape and a dtype convertible to the spec's (floating types among
  // themselves; integer types only as themselves). Each tensor once. A `t` on cuda:0 goes through
  // one bounded pinned buffer (core/pinned_staging.h) held by the writer until commit, converted on
  // the host chunk by chunk: the same bytes as the tensor on the CPU gives.
  void write(const std::string& name, const Tensor& t);
  void commit();
  const std::string& path() const { return path_; }
  uint64_t file_size() const { return file_size_; }  // header + data, known from the start

 private:
  struct Slot {
    DType dtype;
    Shape shape;
    uint64_t offset;  // absolute, in the file
    bool written = false;
  };
  std::string path_;
  std::unique_ptr<FileWriter> file_;
  std::map<std::string, Slot> slots_;
  std::unique_ptr<PinnedStaging> staging_;  // for GPU tensors, taken at the first
  uint64_t file_size_ = 0;
  size_t remaining_ = 0;  // tensors not written yet
};

// The file's dtype string for a titan dtype.
const char* safetensors_dtype_name(DType dt);  // "F32", "BF16", "F16", "I32", "I64"

}  // namespace titan
