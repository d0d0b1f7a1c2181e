// RMSNorm, cpu variant, f32 in HF's order of operations (Qwen3RMSNorm in f32):
//   rstd = 1 / sqrt(sum(x^2) / D + eps);  y = w * (x * rstd)
// Row sums use 16 lanes in a fixed order. The backward computes dx row by row and dw from partial
// sums over fixed blocks of rows (a function of N and D only), added in block order, so dw does not
// depend on how blocks are spread over threads.
#include <cmath>
#include <vector>

#include "core/threading.h"
#include "ops/rmsnorm/checks.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace titan {
namespace {

constexpr int kLanes = 16;

// sum_j a[j] * b[j] over 16 lanes, lanes then added pairwise.
inline float dot_lanes(const float* __restrict a, const float* __restrict b, int64_t D) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= D; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[j + l] * b[j + l];
  for (int l = 0; j < D; ++j, ++l) acc[l] += a[j] * b[j];
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

// Rows per task: about 16K elements.
int64_t grain_rows(int64_t D) { return D >= 16384 ? 1 : 16384 / D; }

void forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  const auto [N, D] = rmsnorm_detail::check_forward(x, w, y, rstd);
  const float* xp = x.data<float>();  // [N, D]
  const float* wp = w.data<float>();  // [D]
  float* yp = y.data<float>();        // [N, D]; may alias x (the row sum is taken before writing)
  float* rp = rstd.data<float>();     // [N]
  parallel_for(N, grain_rows(D), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* xr = xp + n * D;
      const float r = 1.0f / std::sqrt(dot_lanes(xr, xr, D) / float(D) + eps);
      rp[n] = r;
      float* yr = yp + n * D;
      for (int64_t j = 0; j < D; ++j) yr[j] = wp[j] * (xr[j] * r);
    }
  });
}

void backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dw) {
  const auto [N, D] = rmsnorm_detail::check_backward(x, w, rstd, dy, dx, dw);
  const float* xp = x.data<float>();     // [N, D]
  const float* wp = w.data<float>();     // [D]
  const float* rp = rstd.data<float>();  // [N]
  const float* gp = dy.data<float>();    // [N, D]
  float* dxp = dx.data<float>();         // [N, D]; may alias dy (a row is fully read first)
  const int64_t block = grain_rows(D), nblocks = (N + block - 1) / block;
  std::vector<float> partial(size_t(nblocks * D));  // [nblocks, D] sums of dy * x_hat per block
  parallel_for(nblocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> wdy(static_cast<size_t>(D));  // w * dy of one row
    for (int64_t b = b0; b < b1; ++b) {
      float* __restrict pw = partial.data() + b * D;
      for (int64_t j = 0; j < D; ++j) pw[j] = 0.0f;
      const int64_t n_end = std::min(N, (b + 1) * block);
      for (int64_t n = b * block; n < n_end; ++n) {
        const float* __restrict xr = xp + n * D;
        const float* gr = gp + n * D;
        const float r = rp[n];
        float* __restrict t = wdy.data();
        for (int64_t j = 0; j < D; ++j) t[j] = wp[j] * gr[j];
        // dx = r (w dy - x_hat mean(w dy x_hat)) = r w dy - c x,  c = r^3 sum(w dy x) / D
        const float c = r * r * r * (dot_lanes(t, xr, D) / float(D));
        for (int64_t j = 0; j < D; ++j) pw[j] += gr[j] * (xr[j] * r);
        float* dxr = dxp + n * D;
        for (int64_t j = 0; j < D; ++j) dxr[j] = r * t[j] - c * xr[j];
      }
    }
  });
  float* __restrict dwp = dw.data<float>();
  parallel_for(D, 1024, [&](int64_t j0, int64_t j1) {
    for (int64_t b = 0; b < nblocks; ++b) {
      const float* __restrict pw = partial.data() + b * D;
      for (int64_t j = j0; j < j1; ++j) dwp[j] += pw[j];
    }
  });
}

const RMSNormKernel kCpu{"cpu", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(RMSNormKernel, "cpu", DeviceType::CPU, kCpu);
}  // namespace titan
