// RMSNorm, cpu variant, f32 in HF's order of operations (Qwen3RMSNorm in f32):
//   rstd = 1 / sqrt(sum(x^2) / D + eps);  y = w * (x * rstd)
// Row sums use 16 lanes in a fixed order. The backward computes dx vector by vector and dw from
// partial sums over fixed blocks of vectors (a function of N and D only), added in block order,
// so dw does not depend on how blocks are spread over threads. Operands are row views
// (rmsnorm.h): each vector is found through its view's row stride, so strided views cost nothing.
// A BF16 y is computed in f32 into a per-thread row and rounded from there (L1-resident).
#include <cmath>
#include <vector>

#include "core/threading.h"
#include "ops/matmul/bf16_convert.h"
#include "ops/op_checks.h"
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

// Vectors per task: about 16K elements.
int64_t grain_rows(int64_t D) { return D >= 16384 ? 1 : 16384 / D; }

void forward(const ExecContext& ctx, const RowView& x, const Tensor& w, float eps, const RowView& y, Tensor& rstd) {
  opcheck::host_context(ctx, "rmsnorm.cpu");
  const auto [N, D] = rmsnorm_detail::check_forward(x, w, y, rstd);
  const bool bf16 = y.t.dtype() == DType::BF16;
  const float* wp = w.data<float>();  // [D]
  float* rp = rstd.data<float>();     // [N]
  const auto xs = x.ptr<float>();
  const auto yf = bf16 ? RowView::Ptr<float>{} : y.ptr<float>();
  const auto yb = bf16 ? y.ptr<uint16_t>() : RowView::Ptr<uint16_t>{};
  parallel_for(N, grain_rows(D), [&](int64_t n0, int64_t n1) {
    std::vector<float> tmp(bf16 ? size_t(D) : 0);  // the f32 row of a BF16 y
    for (int64_t n = n0; n < n1; ++n) {
      const float* xr = xs.vec(n);  // y may be the same view as x: the row sum is taken first
      const float r = 1.0f / std::sqrt(dot_lanes(xr, xr, D) / float(D) + eps);
      rp[n] = r;
      float* yr = bf16 ? tmp.data() : yf.vec(n);
      for (int64_t j = 0; j < D; ++j) yr[j] = wp[j] * (xr[j] * r);
      if (bf16) f32_to_bf16_row(yr, yb.vec(n), size_t(D));
    }
  });
}

void backward(const ExecContext& ctx, const RowView& x, const Tensor& w, const Tensor& rstd, const RowView& dy,
              const RowView& dx, Tensor& dw, bool accumulate) {
  opcheck::host_context(ctx, "rmsnorm.cpu");
  const auto [N, D] = rmsnorm_detail::check_backward(x, w, rstd, dy, dx, dw);
  const float* wp = w.data<float>();     // [D]
  const float* rp = rstd.data<float>();  // [N]
  const auto xs = x.ptr<float>(), dys = dy.ptr<float>(), dxs = dx.ptr<float>();
  const int64_t block = grain_rows(D), nblocks = (N + block - 1) / block;
  std::vector<float> partial(size_t(nblocks * D));  // [nblocks, D] sums of dy * x_hat per block
  parallel_for(nblocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> wdy(static_cast<size_t>(D));  // w * dy of one vector
    for (int64_t b = b0; b < b1; ++b) {
      float* __restrict pw = partial.data() + b * D;
      for (int64_t j = 0; j < D; ++j) pw[j] = 0.0f;
      const int64_t n_end = std::min(N, (b + 1) * block);
      for (int64_t n = b * block; n < n_end; ++n) {
        const float* __restrict xr = xs.vec(n);
        const float* gr = dys.vec(n);
        const float r = rp[n];
        float* __restrict t = wdy.data();
        for (int64_t j = 0; j < D; ++j) t[j] = wp[j] * gr[j];
        // dx = r (w dy - x_hat mean(w dy x_hat)) = r w dy - c x,  c = r^3 sum(w dy x) / D
        const float c = r * r * r * (dot_lanes(t, xr, D) / float(D));
        for (int64_t j = 0; j < D; ++j) pw[j] += gr[j] * (xr[j] * r);
        float* dxr = dxs.vec(n);  // may be dy's vector: dy is fully read above
        if (accumulate)
          for (int64_t j = 0; j < D; ++j) dxr[j] += r * t[j] - c * xr[j];
        else
          for (int64_t j = 0; j < D; ++j) dxr[j] = r * t[j] - c * xr[j];
      }
    }
  });
  if (!dw.defined()) return;
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
