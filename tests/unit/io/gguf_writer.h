// A hand-made GGUF image for tests (io/gguf.h has the layout): metadata of any type and tensor
// info entries (kv first, then tensors, as the format orders them; no tensor data).
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "io/gguf.h"

namespace titan::iotest {

class GgufWriter {
 public:
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void str(std::string_view s) {
    u64(s.size());
    body_.append(s);
  }
  void key(std::string_view k, GgufType t) {
    ++kv_;
    str(k);
    u32(uint32_t(t));
  }
  void kv_string(std::string_view k, std::string_view v) {
    key(k, GgufType::STRING);
    str(v);
  }
  void kv_u32(std::string_view k, uint32_t v) {
    key(k, GgufType::U32);
    u32(v);
  }
  void kv_strings(std::string_view k, const std::vector<std::string>& v) {
    key(k, GgufType::ARRAY);
    u32(uint32_t(GgufType::STRING));
    u64(v.size());
    for (auto& s : v) str(s);
  }
  // An array of n elements of `elem` (a fixed-size type), every byte `fill`.
  void kv_array(std::string_view k, GgufType elem, uint64_t n, size_t width, char fill = 0) {
    key(k, GgufType::ARRAY);
    u32(uint32_t(elem));
    u64(n);
    body_.append(size_t(n * width), fill);
  }
  // A tensor info entry (name, dims, ggml type, offset); no data is added.
  void tensor(std::string_view name, const std::vector<uint64_t>& ne, uint32_t type, uint64_t offset) {
    ++tensors_;
    str(name);
    u32(uint32_t(ne.size()));
    for (uint64_t d : ne) u64(d);
    u32(type);
    u64(offset);
  }
  // The file: header padded to the default alignment, then (no tensors) nothing more.
  std::string image() const {
    std::string out;
    auto put = [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
    const uint32_t magic = 0x46554747, version = 3;
    const uint64_t tensors = tensors_, kv = kv_;
    put(&magic, 4);
    put(&version, 4);
    put(&tensors, 8);
    put(&kv, 8);
    out += body_;
    out.append((32 - out.size() % 32) % 32, '\0');  // the (empty) data section starts aligned
    return out;
  }

 private:
  void raw(const void* p, size_t n) { body_.append(static_cast<const char*>(p), n); }
  std::string body_;
  uint64_t kv_ = 0, tensors_ = 0;
};

}  // namespace titan::iotest
