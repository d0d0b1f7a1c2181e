// Embedding, cpu variant. Forward: rows copied in parallel. Backward: the columns of H are split in
// fixed 64-wide strips (one per task), and each strip walks all positions in order, so every
// dweight element is summed in position order whatever the thread count, with no write conflicts
// between tasks even when ids repeat.
#include <cstring>
#include <vector>

#include "core/threading.h"
#include "ops/embedding/checks.h"
#include "ops/embedding/embedding.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

std::vector<int64_t> ids_of(const Tensor& ids) {
  std::vector<int64_t> v(size_t(ids.numel()));
  for (int64_t n = 0; n < ids.numel(); ++n) v[size_t(n)] = opcheck::index_at(ids, n);
  return v;
}

void forward(const ExecContext& ctx, const Tensor& ids, const Tensor& weight, Tensor& out) {
  opcheck::host_context(ctx, "embedding.cpu");
  const int64_t N = embedding_detail::check(ids, weight, out, "out");
  const int64_t H = weight.dim(1);
  const std::vector<int64_t> id = ids_of(ids);
  const float* w = weight.data<float>();  // [V, H]
  float* y = out.data<float>();           // [N, H]
  parallel_for(N, H >= 4096 ? 1 : 4096 / H, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) std::memcpy(y + n * H, w + id[size_t(n)] * H, size_t(H) * sizeof(float));
  });
}

void backward(const ExecContext& ctx, const Tensor& ids, const Tensor& dout, Tensor& dweight) {
  opcheck::host_context(ctx, "embedding.cpu");
  const int64_t N = embedding_detail::check(ids, dweight, dout, "dout");
  const int64_t H = dweight.dim(1);
  const std::vector<int64_t> id = ids_of(ids);
  const float* dy = dout.data<float>();  // [N, H]
  float* dw = dweight.data<float>();     // [V, H]
  constexpr int64_t kStrip = 64;
  parallel_for((H + kStrip - 1) / kStrip, 1, [&](int64_t s0, int64_t s1) {
    const int64_t j0 = s0 * kStrip, j1 = std::min(H, s1 * kStrip);
    for (int64_t n = 0; n < N; ++n) {
      const float* __restrict src = dy + n * H;
      float* __restrict dst = dw + id[size_t(n)] * H;
      for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
    }
  });
}

const EmbeddingKernel kCpu{"cpu", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(EmbeddingKernel, "cpu", DeviceType::CPU, kCpu);
}  // namespace titan
