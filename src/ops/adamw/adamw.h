// AdamW with PyTorch semantics (torch.optim.AdamW, not amsgrad, not maximize):
//   p *= 1 - lr * wd
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// t is the 1-based step count.
#pragma once
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct AdamWParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
  int64_t step = 1;
};

// One tensor of a list step: the parameter, its gradient and its two moments (exp_avg, exp_avg_sq).
struct AdamWTensors {
  Tensor* param = nullptr;
  const Tensor* grad = nullptr;
  Tensor* m = nullptr;
  Tensor* v = nullptr;
};

struct AdamWKernel {
  static constexpr const char* op_name = "adamw";
  const char* variant;
  void (*step)(const ExecContext& ctx, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& hp);
  // The list form (optional): every tensor updated with the same hyperparameters, with exactly
  // the results of `step` on each in turn. A variant without it is called per tensor (adamw_step_all).
  void (*step_multi)(const ExecContext& ctx, const std::vector<AdamWTensors>& ts, const AdamWParams& hp) = nullptr;
};

// The list step through k: its step_multi (one launch for the cuda variant), else k.step per tensor.
inline void adamw_step_all(const ExecContext& ctx, const AdamWKernel& k, const std::vector<AdamWTensors>& ts,
                           const AdamWParams& hp) {
  if (k.step_multi) return k.step_multi(ctx, ts, hp);
  for (const AdamWTensors& t : ts) {
    TITAN_CHECK(t.param && t.grad && t.m && t.v, "adamw: a list entry lacks its param, grad, exp_avg or exp_avg_sq");
    k.step(ctx, *t.param, *t.grad, *t.m, *t.v, hp);
  }
}

}  // namespace titan
