// Bias, reference variant: plain loops; the column sums of the backward in double.
#include <vector>

#include "ops/bias/checks.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

void forward(const ExecContext& ctx, Tensor& y, const Tensor& b) {
  opcheck::host_context(ctx, "bias.reference");
  const int64_t N = bias_checks::check(y, b, "y", "b"), M = y.dim(0);
  float* yp = y.data<float>();
  const float* bp = b.data<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) yp[m * N + n] = float(double(yp[m * N + n]) + double(bp[n]));
}

void backward(const ExecContext& ctx, const Tensor& dy, Tensor& db) {
  opcheck::host_context(ctx, "bias.reference");
  const int64_t N = bias_checks::check(dy, db, "dy", "db"), M = dy.dim(0);
  const float* g = dy.data<float>();
  float* d = db.data<float>();
  std::vector<double> sum(size_t(N), 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) sum[size_t(n)] += g[m * N + n];
  for (int64_t n = 0; n < N; ++n) d[n] = float(double(d[n]) + sum[size_t(n)]);
}

const BiasKernel kReference{"reference", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(BiasKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
