// Training-checkpoint tensor files (*.tensors): a small self-checking binary format of our own,
// so that checkpoints do not depend on the safetensors module and carry per-tensor checksums.
//
//   "TTCKPT01"                                  8-byte magic
//   tensor data                                 each tensor at a 64-byte aligned file offset
//   index                                       JSON: {"format":"titan-tensors","version":1,
//                                                 "tensors":[{"name","dtype","shape","offset",
//                                                 "nbytes","crc32c"}, ...]}
//   uint64 index_bytes | uint32 crc32c(index) | "TTCKEND1"   footer (little endian)
//
// The index sits at the end so the writer streams every tensor straight from memory in one pass.
// A reader checks the magics, the footer against the file size, the index CRC, every entry's
// bounds and alignment, and each tensor's CRC as it reads it; every failure names the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace titan {

// Write (and fsync) `path`. Names must be unique and non-empty; tensors CPU and contiguous.
void write_tensor_file(const std::string& path, const std::vector<NamedTensor>& tensors);

struct TensorFileEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t offset, nbytes;
  uint32_t crc32c;
};

class TensorFileReader {
 public:
  explicit TensorFileReader(const std::string& path);  // validates magic, footer and index
  ~TensorFileReader();
  TensorFileReader(const TensorFileReader&) = delete;
  TensorFileReader& operator=(const TensorFileReader&) = delete;

  const std::vector<TensorFileEntry>& entries() const { return entries_; }
  const TensorFileEntry* find(const std::string& name) const;  // nullptr when absent
  // Read into `dst` (same dtype and shape, else an error naming file and tensor); verifies CRC.
  void read_into(const std::string& name, Tensor& dst) const;
  Tensor read(const std::string& name) const;  // new owned tensor; verifies CRC
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::vector<TensorFileEntry> entries_;
};

}  // namespace titan
