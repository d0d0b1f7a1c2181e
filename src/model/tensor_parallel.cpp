#include "model/tensor_parallel.h"

#include <cstring>
#include <vector>

#include "core/error.h"

namespace titan {

namespace {

// A tensor seen as [outer, n * block rows along dim, inner bytes].
struct Split {
  int64_t outer = 1, rows = 0, inner = 0;  // rows: the local extent along dim; inner in bytes
};

Split split_of(const Shape& local, int dim, DType dt) {
  TITAN_CHECK(dim >= 0 && size_t(dim) < local.size(), "tensor parallel: dim ", dim, " of ", shape_str(local));
  Split s;
  for (int d = 0; d < dim; ++d) s.outer *= local[size_t(d)];
  s.rows = local[size_t(dim)];
  s.inner = int64_t(dtype_size(dt));
  for (size_t d = size_t(dim) + 1; d < local.size(); ++d) s.inner *= local[d];
  return s;
}

}  // namespace

namespace {

// The segments along dim of the whole tensor (none given: the whole dim), checked to cut into n.
std::vector<int64_t> segments_of(const Tensor& global, int dim, int64_t n, std::span<const int64_t> segments) {
  std::vector<int64_t> seg(segments.begin(), segments.end());
  if (seg.empty()) seg.push_back(global.dim(dim));
  int64_t sum = 0;
  for (const int64_t g : seg) {
    TITAN_CHECK(g % n == 0, "tensor parallel: a part of ", g, " along dim ", dim, " of ", global.str(),
                " does not split over ", n, " ranks");
    sum += g;
  }
  TITAN_CHECK(sum == global.dim(dim), "tensor parallel: parts summing to ", sum, " along dim ", dim, " of ",
              global.str());
  return seg;
}

// For each outer index and segment: copy rank q's block of the segment between the whole tensor
// (at byte offset g) and its local tensor (at l); `len` bytes.
template <class F>
void for_each_block(const Split& s, const std::vector<int64_t>& seg, int64_t n, int64_t q, F f) {
  const int64_t whole_row = s.rows * n * s.inner, local_row = s.rows * s.inner;
  for (int64_t o = 0; o < s.outer; ++o) {
    int64_t g0 = 0, l0 = 0;  // the segment's first row in the whole tensor, in the local one
    for (const int64_t g : seg) {
      const int64_t b = g / n;  // rows of one rank's block
      f(o * whole_row + (g0 + q * b) * s.inner, o * local_row + l0 * s.inner, b * s.inner);
      g0 += g, l0 += b;
    }
  }
}

}  // namespace

void tp_take_shard(const Tensor& global, int dim, int64_t rank, int64_t n, Tensor& local,
                   std::span<const int64_t> segments) {
  TITAN_CHECK(global.dtype() == local.dtype() && global.ndim() == local.ndim(),
              "tensor parallel: shard ", local.str(), " of ", global.str());
  Shape want = global.shape();
  TITAN_CHECK(want[size_t(dim)] % n == 0, "tensor parallel: dim ", dim, " of ", global.str(), " does not split over ",
              n, " ranks");
  want[size_t(dim)] /= n;
  TITAN_CHECK(local.shape() == want, "tensor parallel: shard ", local.str(), " of ", global.str());
  const std::vector<int64_t> seg = segments_of(global, dim, n, segments);
  const Split s = split_of(local.shape(), dim, local.dtype());
  const char* g = static_cast<const char*>(global.raw());
  char* l = static_cast<char*>(local.raw());
  for_each_block(s, seg, n, rank,
                 [&](int64_t go, int64_t lo, int64_t len) { std::memcpy(l + lo, g + go, size_t(len)); });
}

void tp_gather_shards(comm::Comm& tp, const Tensor& local, int dim, Tensor& global, std::span<const int64_t> segments) {
  const int64_t n = tp.size();
  TITAN_CHECK(global.dtype() == local.dtype() && global.ndim() == local.ndim(),
              "tensor parallel: gather ", local.str(), " into ", global.str());
  Shape want = local.shape();
  want[size_t(dim)] *= n;
  TITAN_CHECK(global.shape() == want, "tensor parallel: gather ", local.str(), " into ", global.str());
  const std::vector<int64_t> seg = segments_of(global, dim, n, segments);
  const Split s = split_of(local.shape(), dim, local.dtype());
  const size_t bytes = local.nbytes();
  std::vector<char> all(bytes * size_t(n));
  tp.all_gather_bytes(local.raw(), all.data(), bytes);
  char* g = static_cast<char*>(global.raw());
  for (int64_t q = 0; q < n; ++q) {
    const char* l = all.data() + size_t(q) * bytes;
    for_each_block(s, seg, n, q,
                   [&](int64_t go, int64_t lo, int64_t len) { std::memcpy(g + go, l + lo, size_t(len)); });
  }
}

}  // namespace titan
