// Helpers shared by the MoE / fused-RoPE tests.
#pragma once
#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "core/tensor.h"
#include "ops/moe/moe.h"

namespace titan::moetest {

inline Tensor randn(const Shape& s, uint64_t stream, double std = 1.0) {
  Tensor t = Tensor::empty(s, DType::F32);
  fill_normal(t, 0.0, std, Philox{1234, stream});
  return t;
}

// max |a - r| / max |r| (relative to the reference's largest magnitude).
inline double rel_err(const Tensor& a, const Tensor& r) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < r.numel(); ++i) {
    d = std::max(d, std::fabs(double(a.data<float>()[i]) - r.data<float>()[i]));
    m = std::max(m, std::fabs(double(r.data<float>()[i])));
  }
  return m > 0 ? d / m : d;
}

struct MoEProblem {
  Tensor x, router, gate_up, down, bias, dy;
  int64_t K;
  bool norm;
  MoEArgs args(DType compute = DType::F32) const {
    MoEArgs a;
    a.x = &x, a.router = &router, a.gate_up = &gate_up, a.down = &down;
    a.bias = bias.defined() ? &bias : nullptr;
    a.top_k = K, a.norm_topk_prob = norm, a.compute = compute;
    return a;
  }
};

inline MoEProblem make_problem(int64_t T, int64_t H, int64_t E, int64_t I, int64_t K, bool norm, uint64_t seed) {
  MoEProblem p;
  p.x = randn({T, H}, seed);
  p.router = randn({E, H}, seed + 1, 0.5);
  p.gate_up = randn({E, 2 * I, H}, seed + 2, 0.3);
  p.down = randn({E, H, I}, seed + 3, 0.3);
  p.dy = randn({T, H}, seed + 4);
  p.K = K;
  p.norm = norm;
  return p;
}

struct MoEResult {
  Tensor y, dx, drouter, dgate_up, ddown;
  MoESaved saved;
};

inline MoEResult run_moe(const MoEKernel& k, const MoEProblem& p, DType compute = DType::F32,
                         const Tensor* dlogits_extra = nullptr) {
  MoEResult r;
  const MoEArgs a = p.args(compute);
  r.y = Tensor::empty(p.x.shape(), DType::F32);
  k.forward(a, r.y, r.saved);
  r.dx = Tensor::empty(p.x.shape(), DType::F32);
  r.drouter = Tensor::zeros(p.router.shape(), DType::F32);
  r.dgate_up = Tensor::zeros(p.gate_up.shape(), DType::F32);
  r.ddown = Tensor::zeros(p.down.shape(), DType::F32);
  MoEGrads g;
  g.dx = &r.dx, g.drouter = &r.drouter, g.dgate_up = &r.dgate_up, g.ddown = &r.ddown;
  g.dlogits_extra = dlogits_extra;
  k.backward(a, r.saved, p.dy, g);
  return r;
}

}  // namespace titan::moetest
