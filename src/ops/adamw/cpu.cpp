// AdamW, cpu variant: one fused pass over (p, g, m, v), 8 lanes at a time, in the f32 operation
// order of torch.optim.AdamW's single-tensor CPU path (torch/optim/adam.py, decoupled weight decay):
//   p.mul_(1 - lr*wd)                      p = p * c0
//   m.lerp_(g, 1 - b1)                     m = fma(1 - b1, g - m, m)    (ATen's vectorized lerp)
//   v.mul_(b2).addcmul_(g, g, 1 - b2)      v = fma((1 - b2) * g, g, v * b2)  (ATen's addcmul)
//   denom = v.sqrt() / sqrt(bc2) + eps
//   p.addcdiv_(m, denom, -lr / bc1)        p = p + (-lr / bc1 * m) / denom
// Every scalar is formed in double (as Python does) and rounded to f32 once, as torch does when it
// hands a Python float to an f32 kernel. Intrinsics fix where an FMA is used (lerp and addcmul,
// like ATen's vectorized kernels) and where each product is rounded on its own (which the compiler
// would otherwise contract); the tail goes through masked loads, so every element sees the same
// arithmetic. m and v then agree bitwise with torch (tests/fixtures/ops/adamw_torch.json); p can
// differ by an ulp or two where torch's sqrt (MKL's vsSqrt in the PyPI build, ~0.75 ulp) differs
// from the correctly rounded one used here.
#include <cmath>

#include "core/threading.h"
#include "ops/adamw/checks.h"
#include "ops/op_checks.h"
#include "ops/vec_math.h"

namespace titan {
namespace {

struct Coeffs {
  __m256 decay, w1, b2, c2, bc2_sqrt, eps, neg_step;
};

// One 8-lane update. kTail: masked loads/stores for the last partial block (AMD's masked stores
// are slow, so full blocks use plain unaligned ones).
template <bool kTail>
inline void update8(float* p, const float* g, float* m, float* v, const Coeffs& c, __m256i mask) {
  auto load = [&](const float* x) { return kTail ? _mm256_maskload_ps(x, mask) : _mm256_loadu_ps(x); };
  auto store = [&](float* x, __m256 y) {
    if constexpr (kTail) _mm256_maskstore_ps(x, mask, y);
    else _mm256_storeu_ps(x, y);
  };
  const __m256 gv = load(g), mv = load(m), vv = load(v);
  const __m256 pv = _mm256_mul_ps(load(p), c.decay);
  const __m256 m1 = _mm256_fmadd_ps(c.w1, _mm256_sub_ps(gv, mv), mv);
  const __m256 v1 = _mm256_fmadd_ps(_mm256_mul_ps(c.c2, gv), gv, _mm256_mul_ps(vv, c.b2));
  const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v1), c.bc2_sqrt), c.eps);
  store(p, _mm256_add_ps(pv, _mm256_div_ps(_mm256_mul_ps(c.neg_step, m1), denom)));
  store(m, m1);
  store(v, v1);
}

void step(const ExecContext& ctx, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& hp) {
  opcheck::host_context(ctx, "adamw.cpu");
  adamw_detail::check(param, grad, m, v, hp);
  const adamw_detail::Hyper hy(hp);
  const Coeffs c{_mm256_set1_ps(float(1.0 - hy.lr * hy.wd)),
                 _mm256_set1_ps(float(1.0 - hy.beta1)),
                 _mm256_set1_ps(float(hy.beta2)),
                 _mm256_set1_ps(float(1.0 - hy.beta2)),
                 _mm256_set1_ps(float(std::sqrt(hy.bias_correction2))),
                 _mm256_set1_ps(float(hy.eps)),
                 _mm256_set1_ps(float(-(hy.lr / hy.bias_correction1)))};
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* mp = m.data<float>();
  float* vp = v.data<float>();
  const int64_t n = param.numel();
  parallel_for((n + 7) / 8, 2048, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i = b * 8;
      if (i + 8 <= n) update8<false>(p + i, g + i, mp + i, vp + i, c, __m256i{});
      else update8<true>(p + i, g + i, mp + i, vp + i, c, vmath::first_lanes(n - i));
    }
  });
}

const AdamWKernel kCpu{"cpu", step};

}  // namespace
TITAN_REGISTER_KERNEL(AdamWKernel, "cpu", DeviceType::CPU, kCpu);
}  // namespace titan
