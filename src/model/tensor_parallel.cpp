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

void tp_take_shard(const Tensor& global, int dim, int64_t rank, int64_t n, Tensor& local) {
  TITAN_CHECK(global.dtype() == local.dtype() && global.ndim() == local.ndim(),
              "tensor parallel: shard ", local.str(), " of ", global.str());
  Shape want = global.shape();
  TITAN_CHECK(want[size_t(dim)] % n == 0, "tensor parallel: dim ", dim, " of ", global.str(), " does not split over ",
              n, " ranks");
  want[size_t(dim)] /= n;
  TITAN_CHECK(local.shape() == want, "tensor parallel: shard ", local.str(), " of ", global.str());
  const Split s = split_of(local.shape(), dim, local.dtype());
  const char* g = static_cast<const char*>(global.raw());
  char* l = static_cast<char*>(local.raw());
  const int64_t len = s.rows * s.inner;
  for (int64_t o = 0; o < s.outer; ++o) std::memcpy(l + o * len, g + (o * n + rank) * len, size_t(len));
}

void tp_gather_shards(comm::Comm& tp, const Tensor& local, int dim, Tensor& global) {
  const int64_t n = tp.size();
  TITAN_CHECK(global.dtype() == local.dtype() && global.ndim() == local.ndim(),
              "tensor parallel: gather ", local.str(), " into ", global.str());
  Shape want = local.shape();
  want[size_t(dim)] *= n;
  TITAN_CHECK(global.shape() == want, "tensor parallel: gather ", local.str(), " into ", global.str());
  const Split s = split_of(local.shape(), dim, local.dtype());
  const size_t bytes = local.nbytes();
  std::vector<char> all(bytes * size_t(n));
  tp.all_gather_bytes(local.raw(), all.data(), bytes);
  char* g = static_cast<char*>(global.raw());
  const int64_t len = s.rows * s.inner;
  for (int64_t q = 0; q < n; ++q)
    for (int64_t o = 0; o < s.outer; ++o)
      std::memcpy(g + (o * n + q) * len, all.data() + size_t(q) * bytes + size_t(o * len), size_t(len));
}

}  // namespace titan
