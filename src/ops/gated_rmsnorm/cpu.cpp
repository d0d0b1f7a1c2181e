// gated_rmsnorm, cpu variant in f32, in transformers' order (Qwen3_5RMSNormGated in f32:
// x r, times w, times silu(z)); rows in parallel, dw from per-block partial sums added in block order.
#include <cmath>
#include <vector>

#include "core/threading.h"
#include "ops/gated_rmsnorm/gated_rmsnorm.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

constexpr int64_t kBlock = 64;  // rows per dw partial sum

inline float rstd_of(const float* x, int64_t D, float eps) {
  float ss = 0;
  for (int64_t j = 0; j < D; ++j) ss += x[j] * x[j];
  return 1.0f / std::sqrt(ss / float(D) + eps);
}

void forward(const ExecContext& ctx, const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) {
  opcheck::host_context(ctx, "gated_rmsnorm.cpu");
  const int64_t N = gated_rmsnorm::check(x, z, w, {&y}, "gated_rmsnorm.cpu forward"), D = w.numel();
  const float *xp = x.data<float>(), *zp = z.data<float>(), *wp = w.data<float>();
  float* yp = y.data<float>();
  parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* xr = xp + n * D;
      const float* zr = zp + n * D;
      const float r = rstd_of(xr, D, eps);
      for (int64_t j = 0; j < D; ++j) yp[n * D + j] = wp[j] * (xr[j] * r) * (zr[j] / (1.0f + std::exp(-zr[j])));
    }
  });
}

void backward(const ExecContext& ctx, const Tensor& x, const Tensor& z, const Tensor& w, float eps, const Tensor& dy,
              Tensor& dx, Tensor& dz, Tensor& dw) {
  opcheck::host_context(ctx, "gated_rmsnorm.cpu");
  const int64_t N = gated_rmsnorm::check(x, z, w, {&dy, &dx, &dz}, "gated_rmsnorm.cpu backward"), D = w.numel();
  if (dw.defined()) TITAN_CHECK(dw.dtype() == DType::F32 && dw.numel() == D, "gated_rmsnorm.cpu backward: 'dw' must be f32 [D], got ", dw.str());
  const float *xp = x.data<float>(), *zp = z.data<float>(), *wp = w.data<float>(), *gp = dy.data<float>();
  const int64_t nb = (N + kBlock - 1) / kBlock;
  std::vector<float> part(size_t(nb * D), 0.0f);
  parallel_for(nb, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> nn(static_cast<size_t>(D));
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t n = b * kBlock; n < std::min(N, (b + 1) * kBlock); ++n) {
        const float* xr = xp + n * D;
        const float r = rstd_of(xr, D, eps);
        float dot = 0;
        for (int64_t j = 0; j < D; ++j) {
          const float zz = zp[n * D + j], s = 1.0f / (1.0f + std::exp(-zz)), xh = xr[j] * r, g = gp[n * D + j];
          nn[size_t(j)] = g * zz * s * wp[j];
          dot += nn[size_t(j)] * xh;
          part[size_t(b * D + j)] += g * zz * s * xh;
          dz.data<float>()[n * D + j] = g * wp[j] * xh * (s + zz * s * (1.0f - s));
        }
        const float m = dot / float(D);
        for (int64_t j = 0; j < D; ++j) dx.data<float>()[n * D + j] = r * (nn[size_t(j)] - xr[j] * r * m);
      }
  });
  if (dw.defined())
    for (int64_t b = 0; b < nb; ++b)
      for (int64_t j = 0; j < D; ++j) dw.data<float>()[j] += part[size_t(b * D + j)];
}

const GatedRMSNormKernel kCpu{"cpu", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(GatedRMSNormKernel, "cpu", DeviceType::CPU, kCpu);
}  // namespace titan
