#include "train/tensor_region.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace titan {

std::string TensorRegion::str() const {
  if (!is_box()) return "elements [" + std::to_string(offset) + ", " + std::to_string(offset + count) + ")";
  std::string s = "box [";
  for (size_t d = 0; d < box_shape.size(); ++d) {
    const int64_t o = d < box_offset.size() ? box_offset[d] : 0;
    s += (d ? ", " : "") + std::to_string(o) + ":" + std::to_string(o + box_shape[d]);
  }
  return s + "]";
}

std::string region_outside(const TensorRegion& r, const Shape& full) {
  const int64_t n = shape_numel(full);
  if (!r.is_box()) {
    if (r.offset < 0 || r.count < 0 || r.offset > n || r.count > n - r.offset)
      return r.str() + " lie outside its full shape " + shape_str(full) + " (" + std::to_string(n) + " elements)";
    return "";
  }
  if (r.box_offset.size() != full.size() || r.box_shape.size() != full.size())
    return r.str() + " has not the rank of its full shape " + shape_str(full);
  for (size_t d = 0; d < full.size(); ++d)
    if (r.box_offset[d] < 0 || r.box_shape[d] < 0 || r.box_offset[d] > full[d] ||
        r.box_shape[d] > full[d] - r.box_offset[d])
      return r.str() + " lies outside its full shape " + shape_str(full);
  return "";
}

std::vector<TensorRun> region_runs(const TensorRegion& r, const Shape& full) {
  if (!r.is_box()) {
    if (r.count == 0) return {};
    return {{r.offset, 0, r.count}};
  }
  const size_t nd = full.size();
  if (shape_numel(r.box_shape) == 0) return {};
  if (nd == 0) return {{0, 0, 1}};
  // k: the outermost dim from which the box is contiguous in the full tensor (every dim after k whole).
  size_t k = nd - 1;
  while (k > 0 && r.box_shape[k] == full[k] && r.box_offset[k] == 0) --k;
  std::vector<int64_t> stride(nd, 1);
  for (size_t d = nd - 1; d-- > 0;) stride[d] = stride[d + 1] * full[d + 1];
  const int64_t len = r.box_shape[k] * stride[k];
  int64_t count = 1;
  for (size_t d = 0; d < k; ++d) count *= r.box_shape[d];
  std::vector<TensorRun> runs;
  runs.reserve(size_t(count));
  std::vector<int64_t> idx(k, 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t flat = r.box_offset[k] * stride[k];
    for (size_t d = 0; d < k; ++d) flat += (r.box_offset[d] + idx[d]) * stride[d];
    runs.push_back({flat, i * len, len});
    for (size_t d = k; d-- > 0;) {  // next multi-index, row-major
      if (++idx[d] < r.box_shape[d]) break;
      idx[d] = 0;
    }
  }
  return runs;
}

namespace {

// Boxes of [b, e) within the sub-tensor of dims d.. at index prefix `at` (dims < d fixed at at[..]).
void range_boxes_at(const Shape& shape, size_t d, Shape& at, int64_t b, int64_t e, std::vector<TensorRegion>& out) {
  if (b >= e) return;
  const size_t nd = shape.size();
  int64_t stride = 1;  // elements per index of dim d
  for (size_t k = d + 1; k < nd; ++k) stride *= shape[k];
  auto box = [&](int64_t i0, int64_t n) {  // indices [i0, i0 + n) of dim d, every later dim whole
    TensorRegion r;
    r.box_offset = at, r.box_shape.assign(d, 1);
    r.box_offset.push_back(i0), r.box_shape.push_back(n);
    for (size_t k = d + 1; k < nd; ++k) r.box_offset.push_back(0), r.box_shape.push_back(shape[k]);
    out.push_back(r);
  };
  const int64_t i0 = b / stride, i1 = (e - 1) / stride;  // first and last index of dim d touched
  auto inner = [&](int64_t i, int64_t lo, int64_t hi) {
    at.push_back(i);
    range_boxes_at(shape, d + 1, at, lo, hi, out);
    at.pop_back();
  };
  if (i0 == i1) {
    if (b % stride == 0 && e - b == stride) return box(i0, 1);
    return inner(i0, b - i0 * stride, e - i0 * stride);
  }
  int64_t first = i0, last = i1;  // the whole indices [first, last]
  if (b % stride != 0) inner(i0, b - i0 * stride, stride), first = i0 + 1;
  const bool tail = e % stride != 0;
  if (tail) last = i1 - 1;
  if (first <= last) box(first, last - first + 1);
  if (tail) inner(i1, 0, e - i1 * stride);
}

}  // namespace

std::vector<TensorRegion> range_boxes(const Shape& shape, int64_t offset, int64_t count) {
  std::vector<TensorRegion> out;
  if (count <= 0) return out;
  if (shape.empty()) {
    TensorRegion r;
    r.offset = 0, r.count = 1;
    out.push_back(r);
    return out;
  }
  Shape at;
  range_boxes_at(shape, 0, at, offset, offset + count, out);
  return out;
}

std::pair<int64_t, int64_t> region_bounds(const TensorRegion& r, const Shape& full) {
  const std::vector<TensorRun> runs = region_runs(r, full);
  if (runs.empty()) return {0, 0};
  return {runs.front().flat, runs.back().flat + runs.back().len};
}

void copy_runs(const std::vector<TensorRun>& src_runs, const char* src, int64_t src_local0, int64_t src_count,
               const std::vector<TensorRun>& dst_runs, char* dst, size_t esize, ByteCopy copy) {
  if (!copy) copy = [](void* d, const void* s, size_t n) { std::memcpy(d, s, n); };
  // Source runs within the available local window, then their overlap with the destination runs
  // (both sorted by flat): two pointers.
  size_t j = 0;
  for (const TensorRun& s : src_runs) {
    const int64_t lb = std::max(s.local, src_local0), le = std::min(s.local + s.len, src_local0 + src_count);
    if (lb >= le) continue;
    const int64_t fb = s.flat + (lb - s.local), fe = s.flat + (le - s.local);
    while (j < dst_runs.size() && dst_runs[j].flat + dst_runs[j].len <= fb) ++j;
    for (size_t t = j; t < dst_runs.size() && dst_runs[t].flat < fe; ++t) {
      const TensorRun& d = dst_runs[t];
      const int64_t b = std::max(fb, d.flat), e = std::min(fe, d.flat + d.len);
      if (b >= e) continue;
      copy(dst + size_t(d.local + (b - d.flat)) * esize, src + size_t(lb - src_local0 + (b - fb)) * esize,
           size_t(e - b) * esize);
    }
  }
}

}  // namespace titan
