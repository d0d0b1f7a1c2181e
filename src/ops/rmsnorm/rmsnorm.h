// RMSNorm as HF Qwen3RMSNorm:  y = w * x / sqrt(mean(x^2) + eps), rows of length D.
//   x: [N, D] f32, w: [D] f32 -> y: [N, D], rstd: [N] (saved for backward)
//   backward: dx[N, D] (overwrite), dw[D] += (accumulate)
//     dx = rstd * (w*dy - x_hat * mean(w*dy*x_hat)),  dw += sum_n dy * x_hat
#pragma once
#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct RMSNormKernel {
  static constexpr const char* op_name = "rmsnorm";
  const char* variant;
  void (*forward)(const Tensor& x, const Tensor& w, float eps, Tensor& y, Tensor& rstd);
  void (*backward)(const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dw);
};

}  // namespace titan
