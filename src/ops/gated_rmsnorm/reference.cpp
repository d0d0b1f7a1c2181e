// gated_rmsnorm, reference variant in double (gated_rmsnorm.h).
#include <cmath>
#include <vector>

#include "ops/gated_rmsnorm/gated_rmsnorm.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

double sig(double z) { return 1.0 / (1.0 + std::exp(-z)); }

void forward(const ExecContext& ctx, const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y) {
  opcheck::host_context(ctx, "gated_rmsnorm.reference");
  const int64_t N = gated_rmsnorm::check(x, z, w, {&y}, "gated_rmsnorm.reference forward"), D = w.numel();
  const float *xp = x.data<float>(), *zp = z.data<float>(), *wp = w.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) ss += double(xp[n * D + j]) * xp[n * D + j];
    const double r = 1.0 / std::sqrt(ss / double(D) + double(eps));
    for (int64_t j = 0; j < D; ++j) {
      const double zz = zp[n * D + j];
      y.data<float>()[n * D + j] = float(double(wp[j]) * double(xp[n * D + j]) * r * zz * sig(zz));
    }
  }
}

void backward(const ExecContext& ctx, const Tensor& x, const Tensor& z, const Tensor& w, float eps, const Tensor& dy,
              Tensor& dx, Tensor& dz, Tensor& dw) {
  opcheck::host_context(ctx, "gated_rmsnorm.reference");
  const int64_t N = gated_rmsnorm::check(x, z, w, {&dy, &dx, &dz}, "gated_rmsnorm.reference backward"), D = w.numel();
  if (dw.defined()) TITAN_CHECK(dw.dtype() == DType::F32 && dw.numel() == D, "gated_rmsnorm.reference backward: 'dw' must be f32 [D], got ", dw.str());
  const float *xp = x.data<float>(), *zp = z.data<float>(), *wp = w.data<float>(), *gp = dy.data<float>();
  std::vector<double> gw(size_t(D), 0.0), nn(static_cast<size_t>(D));
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t j = 0; j < D; ++j) ss += double(xp[n * D + j]) * xp[n * D + j];
    const double r = 1.0 / std::sqrt(ss / double(D) + double(eps));
    double dot = 0;
    for (int64_t j = 0; j < D; ++j) {
      const double zz = zp[n * D + j], s = sig(zz), xh = double(xp[n * D + j]) * r, g = gp[n * D + j];
      nn[size_t(j)] = g * zz * s * double(wp[j]);
      dot += nn[size_t(j)] * xh;
      gw[size_t(j)] += g * zz * s * xh;
      dz.data<float>()[n * D + j] = float(g * double(wp[j]) * xh * (s + zz * s * (1.0 - s)));
    }
    for (int64_t j = 0; j < D; ++j) {
      const double xh = double(xp[n * D + j]) * r;
      dx.data<float>()[n * D + j] = float(r * (nn[size_t(j)] - xh * dot / double(D)));
    }
  }
  if (dw.defined())
    for (int64_t j = 0; j < D; ++j) dw.data<float>()[j] = float(double(dw.data<float>()[j]) + gw[size_t(j)]);
}

const GatedRMSNormKernel kReference{"reference", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(GatedRMSNormKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
