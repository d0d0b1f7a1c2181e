// AdamW, reference variant: the update of adamw.h evaluated in double per element, rounded to f32
// once per state (hyperparameters widened to the decimal values they spell, see checks.h):
//   p' = p (1 - lr wd);  m' = b1 m + (1 - b1) g;  v' = b2 v + (1 - b2) g^2
//   p'' = p' - lr / (1 - b1^t) * m' / (sqrt(v') / sqrt(1 - b2^t) + eps)
#include <cmath>

#include "ops/adamw/checks.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

void step(const ExecContext& ctx, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& hp) {
  opcheck::host_context(ctx, "adamw.reference");
  adamw_detail::check(param, grad, m, v, hp);
  const adamw_detail::Hyper hy(hp);
  const double lr = hy.lr, b1 = hy.beta1, b2 = hy.beta2, eps = hy.eps, wd = hy.wd;
  const double bc1 = hy.bias_correction1, bc2 = hy.bias_correction2;
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* mp = m.data<float>();
  float* vp = v.data<float>();
  for (int64_t i = 0; i < param.numel(); ++i) {
    const double gi = g[i];
    const double mi = b1 * mp[i] + (1.0 - b1) * gi;
    const double vi = b2 * vp[i] + (1.0 - b2) * gi * gi;
    const double pi = double(p[i]) * (1.0 - lr * wd);
    p[i] = float(pi - lr / bc1 * mi / (std::sqrt(vi) / std::sqrt(bc2) + eps));
    mp[i] = float(mi);
    vp[i] = float(vi);
  }
}

const AdamWKernel kReference{"reference", step};

}  // namespace
TITAN_REGISTER_KERNEL(AdamWKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
