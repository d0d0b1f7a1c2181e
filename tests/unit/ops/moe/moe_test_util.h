// Helpers shared by the MoE / fused-RoPE tests.
#pragma once
#include <algorithm>
#include <cmath>

#include "common/test_util.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/moe/moe.h"

namespace titan::moetest {

using test::randn;
using test::rel_err;

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
  k.forward(ExecContext::host(), a, r.y, r.saved);
  r.dx = Tensor::empty(p.x.shape(), DType::F32);
  r.drouter = Tensor::zeros(p.router.shape(), DType::F32);
  r.dgate_up = Tensor::zeros(p.gate_up.shape(), DType::F32);
  r.ddown = Tensor::zeros(p.down.shape(), DType::F32);
  MoEGrads g;
  g.dx = &r.dx, g.drouter = &r.drouter, g.dgate_up = &r.dgate_up, g.ddown = &r.ddown;
  g.dlogits_extra = dlogits_extra;
  k.backward(ExecContext::host(), a, r.saved, p.dy, g);
  return r;
}

}  // namespace titan::moetest
