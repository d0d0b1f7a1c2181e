// RMSNorm, reference variant, in double:
//   rstd = 1 / sqrt(sum(x^2) / D + eps);  x_hat = x * rstd;  y = w * x_hat
//   dx = rstd * (w*dy - x_hat * mean(w*dy*x_hat));  dw += sum_n dy * x_hat
#include <cmath>
#include <vector>

#include "ops/rmsnorm/checks.h"
#include "ops/rmsnorm/rmsnorm.h"

namespace titan {
namespace {

void forward(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd) {
  const auto [N, D] = rmsnorm_detail::check_forward(x, w, y, rstd);
  const float* xp = x.data<float>();  // [N, D]
  const float* wp = w.data<float>();  // [D]
  float* yp = y.data<float>();        // [N, D]
  float* rp = rstd.data<float>();     // [N]
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = xp + n * D;
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) ss += double(xr[j]) * xr[j];
    const double r = 1.0 / std::sqrt(ss / double(D) + double(eps));
    rp[n] = float(r);
    for (int64_t j = 0; j < D; ++j) yp[n * D + j] = float(double(wp[j]) * (double(xr[j]) * r));
  }
}

void backward(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dw) {
  const auto [N, D] = rmsnorm_detail::check_backward(x, w, rstd, dy, dx, dw);
  const float* xp = x.data<float>();    // [N, D]
  const float* wp = w.data<float>();    // [D]
  const float* rp = rstd.data<float>(); // [N]
  const float* gp = dy.data<float>();   // [N, D]
  float* dxp = dx.data<float>();        // [N, D]
  std::vector<double> dw_acc(size_t(D), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = xp + n * D;
    const float* gr = gp + n * D;
    const double r = rp[n];
    double dot = 0;  // sum_j w*dy*x_hat
    for (int64_t j = 0; j < D; ++j) dot += double(wp[j]) * gr[j] * (double(xr[j]) * r);
    const double mean = dot / double(D);
    for (int64_t j = 0; j < D; ++j) {  // dy is read before dx is written (they may alias)
      const double xh = double(xr[j]) * r, g = gr[j];
      dw_acc[size_t(j)] += g * xh;
      dxp[n * D + j] = float(r * (double(wp[j]) * g - xh * mean));
    }
  }
  float* dwp = dw.data<float>();
  for (int64_t j = 0; j < D; ++j) dwp[j] = float(double(dwp[j]) + dw_acc[size_t(j)]);
}

const RMSNormKernel kReference{"reference", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(RMSNormKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
