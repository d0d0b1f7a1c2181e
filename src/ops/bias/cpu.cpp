// Bias, cpu variant. Forward: rows split over threads. Backward: column blocks split over threads,
// each block summed over the rows in order (f32 accumulation of a row-block partial in double per
// 64 rows), so the result does not depend on the thread count.
#include <algorithm>

#include "core/threading.h"
#include "ops/bias/checks.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

void forward(const ExecContext& ctx, Tensor& y, const Tensor& b) {
  opcheck::host_context(ctx, "bias.cpu");
  const int64_t N = bias_checks::check(y, b, "y", "b"), M = y.dim(0);
  float* yp = y.data<float>();
  const float* bp = b.data<float>();
  parallel_for(M, std::max<int64_t>(1, 16384 / std::max<int64_t>(N, 1)), [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      float* __restrict row = yp + m * N;
      for (int64_t n = 0; n < N; ++n) row[n] += bp[n];
    }
  });
}

void backward(const ExecContext& ctx, const Tensor& dy, Tensor& db) {
  opcheck::host_context(ctx, "bias.cpu");
  const int64_t N = bias_checks::check(dy, db, "dy", "db"), M = dy.dim(0);
  const float* g = dy.data<float>();
  float* d = db.data<float>();
  constexpr int64_t kCols = 64, kRows = 64;
  const int64_t blocks = (N + kCols - 1) / kCols;
  parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t c0 = blk * kCols, c1 = std::min(N, c0 + kCols);
      double total[kCols] = {};
      for (int64_t r0 = 0; r0 < M; r0 += kRows) {
        float part[kCols] = {};
        const int64_t r1 = std::min(M, r0 + kRows);
        for (int64_t m = r0; m < r1; ++m)
          for (int64_t c = c0; c < c1; ++c) part[c - c0] += g[m * N + c];
        for (int64_t c = c0; c < c1; ++c) total[c - c0] += part[c - c0];
      }
      for (int64_t c = c0; c < c1; ++c) d[c] = float(double(d[c]) + total[c - c0]);
    }
  });
}

const BiasKernel kCpu{"cpu", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(BiasKernel, "cpu", DeviceType::CPU, kCpu);
}  // namespace titan
