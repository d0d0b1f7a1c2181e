// Embedding, reference variant: a plain gather; the backward sums each vocabulary row's gradient in
// double (every occurrence of the id, in position order) and adds the sum to dweight once.
#include <vector>

#include "ops/embedding/checks.h"
#include "ops/embedding/embedding.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

void forward(const ExecContext& ctx, const Tensor& ids, const Tensor& weight, Tensor& out) {
  opcheck::host_context(ctx, "embedding.reference");
  const int64_t N = embedding_detail::check(ids, weight, out, "out");
  const int64_t H = weight.dim(1);
  const float* w = weight.data<float>();  // [V, H]
  float* y = out.data<float>();           // [N, H]
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = opcheck::index_at(ids, n);
    for (int64_t j = 0; j < H; ++j) y[n * H + j] = w[id * H + j];
  }
}

void backward(const ExecContext& ctx, const Tensor& ids, const Tensor& dout, Tensor& dweight) {
  opcheck::host_context(ctx, "embedding.reference");
  const int64_t N = embedding_detail::check(ids, dweight, dout, "dout");
  const int64_t V = dweight.dim(0), H = dweight.dim(1);
  const float* dy = dout.data<float>();  // [N, H]
  float* dw = dweight.data<float>();     // [V, H]
  // Positions grouped by id (stable), so each touched row is summed once in double.
  std::vector<std::vector<int64_t>> where(static_cast<size_t>(V));
  for (int64_t n = 0; n < N; ++n) where[size_t(opcheck::index_at(ids, n))].push_back(n);
  std::vector<double> acc(static_cast<size_t>(H));
  for (int64_t v = 0; v < V; ++v) {
    if (where[size_t(v)].empty()) continue;
    for (int64_t j = 0; j < H; ++j) acc[size_t(j)] = dw[v * H + j];
    for (int64_t n : where[size_t(v)])
      for (int64_t j = 0; j < H; ++j) acc[size_t(j)] += dy[n * H + j];
    for (int64_t j = 0; j < H; ++j) dw[v * H + j] = float(acc[size_t(j)]);
  }
}

const EmbeddingKernel kReference{"reference", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(EmbeddingKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
