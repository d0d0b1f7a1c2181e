// AdamW with PyTorch semantics (torch.optim.AdamW, not amsgrad, not maximize):
//   p *= 1 - lr * wd
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// t is the 1-based step count.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct AdamWParams {
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
  int64_t step = 1;
};

struct AdamWKernel {
  static constexpr const char* op_name = "adamw";
  const char* variant;
  void (*step)(const ExecContext& ctx, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWParams& hp);
};

}  // namespace titan
