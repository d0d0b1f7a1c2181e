// GGUF, llama.cpp's model container (versions 2 and 3), read-only:
//   u32 magic "GGUF", u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x (string key, u32 value type, value),
//   tensor_count x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset),
//   padding to general.alignment (default 32), then the data section; each tensor's offset is
//   relative to it and a multiple of the alignment.
// Strings are u64 length + bytes; arrays u32 element type + u64 count + elements; all
// little-endian. ne[0] is the fastest-varying dimension (a PyTorch [rows, cols] matrix is
// ne = {cols, rows}).
//
// Validation happens in open(), before anything is handed out, and every error is one line naming
// the file and the reason: bounded counts, lengths and nesting; known value and tensor types;
// unique keys and names; byte sizes that are whole blocks; offsets aligned and inside the file,
// tensors not overlapping; strings valid UTF-8. Memory stays proportional to the file (at most
// about 2 bytes per byte of header): arrays of numbers stay in the file's bytes, arrays of strings
// are views into them.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace titan {

enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12
};
const char* gguf_type_name(GgufType t);

// One metadata value. Views (raw, strs) point into the file's bytes: valid while its GgufFile
// (or a copy of it) lives.
struct GgufValue {
  GgufType type = GgufType::U8;
  // Numbers: integers in i (u64 values above INT64_MAX are refused), floats in f, BOOL in i (0/1).
  int64_t i = 0;
  double f = 0;
  std::string s;                      // STRING
  GgufType elem = GgufType::U8;        // ARRAY: element type
  uint64_t count = 0;                 // ARRAY: number of elements
  std::string_view raw;               // ARRAY of numbers or bools: the elements' bytes (little-endian)
  std::vector<std::string_view> strs;  // ARRAY of STRING
  std::vector<GgufValue> arr;         // ARRAY of ARRAY (at most kGgufMaxNestedArray elements)
  bool is_integer() const;            // an integer type (not BOOL)
  size_t size() const { return size_t(count); }
  bool empty() const { return count == 0; }
  // Element k of an array of integers or bools / of any number type / of strings.
  int64_t int_at(size_t k) const;
  double number_at(size_t k) const;
  std::string_view str_at(size_t k) const { return strs[k]; }
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ggml order: ne[0] fastest
  uint32_t type = 0;        // ggml type id (io/gguf_quants.h)
  uint64_t offset = 0;      // inside the data section
  uint64_t nbytes = 0;
  int64_t numel = 0;
  // PyTorch order (slowest first): ne reversed.
  std::vector<int64_t> torch_shape() const { return {ne.rbegin(), ne.rend()}; }
};

// Limits (far above any real model, low enough that a hostile header cannot exhaust memory).
constexpr uint64_t kGgufMaxKv = 1 << 16, kGgufMaxTensors = 1 << 20, kGgufMaxString = 1 << 26;
constexpr uint64_t kGgufMaxArray = 1 << 24, kGgufMaxDepth = 4, kGgufMaxDims = 4, kGgufMaxNestedArray = 1 << 16;

class GgufFile {
 public:
  static GgufFile open(const std::string& path);
  // Validates an image in memory (the fuzzing entry point); keepalive owns the bytes.
  static GgufFile from_memory(const void* data, size_t size, std::shared_ptr<void> keepalive, const std::string& origin);

  const std::string& origin() const { return origin_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  std::string_view bytes(const GgufTensorInfo& t) const;  // the stored bytes of a tensor of this file

  // Typed metadata access; a wrong type or a missing required key is an error naming the key.
  const GgufValue* find(const std::string& key) const;
  std::optional<int64_t> integer(const std::string& key) const;
  std::optional<double> number(const std::string& key) const;  // any integer or float type
  std::optional<std::string> string(const std::string& key) const;
  std::optional<bool> boolean(const std::string& key) const;
  // An array of `elem` (for integers: any integer element type); null when absent.
  const GgufValue* array(const std::string& key, GgufType elem) const;
  int64_t required_integer(const std::string& key) const;
  std::string required_string(const std::string& key) const;

 private:
  std::string origin_;
  std::shared_ptr<void> keepalive_;
  const uint8_t* data_ = nullptr;  // data section
  uint64_t data_size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

}  // namespace titan
