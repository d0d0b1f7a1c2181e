// Regions of a tensor a checkpoint piece can hold: a range of its row-major flattening (what FSDP's
// flat shards are), or an n-d box (offset and size per dim: what a tensor-parallel shard along
// any dim is — a dim-1 shard of a row-parallel weight is not one range). Both reduce to runs:
// maximal stretches contiguous in the full tensor, each mapped to where it sits in the piece's own
// (row-major, contiguous) data. Tiling checks and copies between pieces work on runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace titan {

struct TensorRun {
  int64_t flat;   // first element in the full tensor's row-major order
  int64_t local;  // first element in the piece's data
  int64_t len;
};

struct TensorRegion {
  // A box when box_shape is non-empty (box_offset the same rank as the full shape); else the
  // range [offset, offset + count).
  int64_t offset = 0, count = 0;
  Shape box_offset, box_shape;
  bool is_box() const { return !box_shape.empty(); }
  int64_t numel() const { return is_box() ? shape_numel(box_shape) : count; }
  // "elements [b, e)" or "box [o0:o0+s0, o1:o1+s1]"
  std::string str() const;
};

// The region's runs within `full`, in increasing flat (and local) order. A box whose trailing dims
// are whole gives one run per combination of its leading indices.
std::vector<TensorRun> region_runs(const TensorRegion& r, const Shape& full);
// Empty when the region lies within `full`, else why not.
std::string region_outside(const TensorRegion& r, const Shape& full);
// [first flat element, one past the last) of a non-empty region.
std::pair<int64_t, int64_t> region_bounds(const TensorRegion& r, const Shape& full);

// The elements [offset, offset + count) of a tensor of `shape`'s row-major order as boxes (in
// that order, each contiguous in it): at most two partial boxes per dim around whole ones. A
// range of a tensor that is itself a box of a larger one (an FSDP chunk of a tensor-parallel
// shard) becomes boxes of the larger one by adding the shard's box offset to each.
std::vector<TensorRegion> range_boxes(const Shape& shape, int64_t offset, int64_t count);

// Copies the overlap of source runs (elements at src, in the source piece's local order) with the
// destination runs into dst; esize bytes per element. `src_local0`: the local index of src[0]
// (a chunk of a streamed source), `src_count` elements available from there. `copy` moves each
// run's bytes (memcpy when null; gpu::copy_to_device for a destination on the GPU).
using ByteCopy = void (*)(void* dst, const void* src, size_t bytes);
void copy_runs(const std::vector<TensorRun>& src_runs, const char* src, int64_t src_local0, int64_t src_count,
               const std::vector<TensorRun>& dst_runs, char* dst, size_t esize, ByteCopy copy = nullptr);

}  // namespace titan
