// RMSNorm, reference variant, in double:
//   rstd = 1 / sqrt(sum(x^2) / D + eps);  x_hat = x * rstd;  y = w * x_hat
//   dx (=|+=) rstd * (w*dy - x_hat * mean(w*dy*x_hat));  dw += sum_n dy * x_hat
// Vector by vector over the row views (rmsnorm.h); a BF16 y is the f32 result rounded to bf16.
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "ops/op_checks.h"
#include "ops/rmsnorm/checks.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace titan {
namespace {

void forward(const ExecContext& ctx, const RowView& x, const Tensor& w, float eps, const RowView& y, Tensor& rstd) {
  opcheck::host_context(ctx, "rmsnorm.reference");
  const auto [N, D] = rmsnorm_detail::check_forward(x, w, y, rstd);
  const bool bf16 = y.t.dtype() == DType::BF16;
  const float* wp = w.data<float>();  // [D]
  float* rp = rstd.data<float>();     // [N]
  const auto xs = x.ptr<float>();
  const auto yf = bf16 ? RowView::Ptr<float>{} : y.ptr<float>();
  const auto yb = bf16 ? y.ptr<uint16_t>() : RowView::Ptr<uint16_t>{};
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = xs.vec(n);  // [D]
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) ss += double(xr[j]) * xr[j];
    const double r = 1.0 / std::sqrt(ss / double(D) + double(eps));
    rp[n] = float(r);
    for (int64_t j = 0; j < D; ++j) {
      const float v = float(double(wp[j]) * (double(xr[j]) * r));
      if (bf16)
        yb.vec(n)[j] = f32_to_bf16(v);
      else
        yf.vec(n)[j] = v;
    }
  }
}

void backward(const ExecContext& ctx, const RowView& x, const Tensor& w, const Tensor& rstd, const RowView& dy,
              const RowView& dx, Tensor& dw, bool accumulate) {
  opcheck::host_context(ctx, "rmsnorm.reference");
  const auto [N, D] = rmsnorm_detail::check_backward(x, w, rstd, dy, dx, dw);
  const float* wp = w.data<float>();     // [D]
  const float* rp = rstd.data<float>();  // [N]
  const auto xs = x.ptr<float>(), dys = dy.ptr<float>(), dxs = dx.ptr<float>();
  std::vector<double> dw_acc(size_t(D), 0.0);
  std::vector<double> g(static_cast<size_t>(D));  // dy of one vector
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = xs.vec(n);
    const float* gr = dys.vec(n);
    float* dxr = dxs.vec(n);
    const double r = rp[n];
    double dot = 0;  // sum_j w*dy*x_hat
    for (int64_t j = 0; j < D; ++j) {
      g[size_t(j)] = gr[j];  // dy is read before dx is written (they may be the same view)
      dot += double(wp[j]) * gr[j] * (double(xr[j]) * r);
    }
    const double mean = dot / double(D);
    for (int64_t j = 0; j < D; ++j) {
      const double xh = double(xr[j]) * r, gj = g[size_t(j)];
      dw_acc[size_t(j)] += gj * xh;
      const double v = r * (double(wp[j]) * gj - xh * mean);
      dxr[j] = accumulate ? float(double(dxr[j]) + v) : float(v);
    }
  }
  if (!dw.defined()) return;  // a frozen weight
  float* dwp = dw.data<float>();
  for (int64_t j = 0; j < D; ++j) dwp[j] = float(double(dwp[j]) + dw_acc[size_t(j)]);
}

const RMSNormKernel kReference{"reference", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(RMSNormKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
