// Training-checkpoint tensor files (*.tensors): a small self-checking binary format of our own,
// so that checkpoints do not depend on the safetensors module and carry per-tensor checksums.
//
//   "TTCKPT01"                                  8-byte magic
//   tensor data                                 each entry at a 64-byte aligned file offset
//   index                                       JSON: {"format":"titan-tensors","version":1|2|3,
//                                                 "tensors":[{"name","dtype","shape","offset",
//                                                 "nbytes","crc32c"[,"full_shape","elem_offset"]
//                                                 [,"full_shape","box_offset"]}, ...]}
//   uint64 index_bytes | uint32 crc32c(index) | "TTCKEND1"   footer (little endian)
//
// An entry is either a whole tensor (no "full_shape"/"elem_offset") or a piece: elements
// [elem_offset, elem_offset + numel(shape)) of the row-major flattening of a tensor whose full
// shape is "full_shape"; a piece's "shape" is 1-D. A piece that covers its whole tensor is written
// as a whole-tensor entry. Version 1 files hold whole tensors only (the format before pieces) and
// are still what a file without pieces is written as; version 2 files may hold pieces. A name may
// repeat in one file only as pieces with the same full shape and dtype and disjoint element ranges.
// Version 3 adds box pieces (train/tensor_region.h): an n-d box of the tensor at "box_offset" whose
// size is "shape", its elements stored row-major — a tensor-parallel shard along any dim.
//
// The index sits at the end so the writer streams every tensor straight from memory in one pass.
// A reader checks the magics, the footer against the file size, the index CRC, every entry's
// bounds, alignment and piece range, and each entry's CRC as it reads it; every failure names the
// file. Reading is bounded in memory: the index, plus at most one chunk of one entry at a time.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "train/tensor_region.h"

namespace titan {

// Elements [offset, offset + data.numel()) of the row-major flattening of the tensor `name`
// whose full shape is `full_shape`. `data` may have any shape with that element count.
// With box_shape set: instead the n-d box at box_offset of that size (data holds its elements
// row-major; offset unused).
struct TensorPiece {
  std::string name;
  Shape full_shape;
  int64_t offset = 0;
  Tensor data;
  Shape box_offset = {}, box_shape = {};
  TensorRegion region() const {
    TensorRegion r;
    if (!box_shape.empty()) r.box_offset = box_offset, r.box_shape = box_shape;
    else r.offset = offset, r.count = data.defined() ? data.numel() : 0;
    return r;
  }
};

// Write (and fsync) `path`. Names non-empty; data on the CPU or on cuda:0 (a GPU tensor is copied
// through one bounded pinned buffer, core/pinned_staging.h, piece by piece: the file is the one
// the same tensors on the CPU give, byte for byte); each piece within its full
// shape; pieces of one name share full shape and dtype and do not overlap. Empty pieces of a
// non-empty tensor carry nothing and are not written.
void write_tensor_pieces(const std::string& path, const std::vector<TensorPiece>& pieces);
// Whole tensors (each must have a unique name).
void write_tensor_file(const std::string& path, const std::vector<NamedTensor>& tensors);

struct TensorFileEntry {
  std::string name;
  DType dtype;
  Shape shape;               // as stored: the full shape for a whole tensor, [n] for a piece
  Shape full_shape;          // the tensor's full shape (== shape for a whole tensor)
  int64_t elem_offset = 0;   // first element of the full tensor held here (0 for a whole tensor)
  bool piece = false;        // stored with "full_shape"/"elem_offset" (or "box_offset")
  Shape box_offset;          // a box piece (version 3): its offset per dim; its size is `shape`
  bool box() const { return !box_offset.empty(); }
  TensorRegion region() const {
    TensorRegion r;
    if (box()) r.box_offset = box_offset, r.box_shape = shape;
    else r.offset = elem_offset, r.count = numel();
    return r;
  }
  uint64_t offset, nbytes;   // byte range in the file
  uint32_t crc32c;
  int64_t numel() const { return shape_numel(shape); }
};

class TensorFileReader {
 public:
  explicit TensorFileReader(const std::string& path);  // validates magic, footer and index
  ~TensorFileReader();
  TensorFileReader(const TensorFileReader&) = delete;
  TensorFileReader& operator=(const TensorFileReader&) = delete;

  // In file order.
  const std::vector<TensorFileEntry>& entries() const { return entries_; }
  // The first entry of that name (a whole tensor, or its first piece in file order); nullptr when absent.
  const TensorFileEntry* find(const std::string& name) const;

  // The entry's nbytes bytes into dst; verifies its CRC.
  void read_entry(const TensorFileEntry& e, void* dst) const;
  // The entry in consecutive chunks (at most 4 MiB each): sink(first element within the entry,
  // bytes, element count). The CRC is checked after the last chunk: on a mismatch this throws,
  // so whatever the sink copied must then be treated as garbage.
  void stream_entry(const TensorFileEntry& e,
                    const std::function<void(int64_t first, const char* bytes, int64_t count)>& sink) const;
  // The same, each chunk read into `buf` (buf_bytes: at least one element, or the whole entry):
  // the pinned staging buffer when the bytes go on to a GPU.
  void stream_entry(const TensorFileEntry& e, char* buf, uint64_t buf_bytes,
                    const std::function<void(int64_t first, const char* bytes, int64_t count)>& sink) const;

  // Whole tensors only (an error for a name stored as pieces). read_into: same dtype and shape,
  // else an error naming file and tensor; a destination on cuda:0 is filled through a pinned
  // buffer. Both verify the CRC.
  void read_into(const std::string& name, Tensor& dst) const;
  Tensor read(const std::string& name) const;  // new owned tensor
  const std::string& path() const { return path_; }

 private:
  const TensorFileEntry& whole(const std::string& name) const;
  std::string path_;
  int fd_ = -1;
  std::vector<TensorFileEntry> entries_;
  std::unordered_map<std::string, size_t> first_;  // name -> index of its first entry
};

}  // namespace titan
