// Bias of a linear layer (HF nn.Linear(bias=True), Qwen2's q/k/v projections), as a separate pass
// over the GEMM's output:
//   forward:  y[m, n] += b[n]                  y [M, N] f32, b [N] f32
//   backward: db[n] += sum_m dy[m, n]          (accumulates, like every parameter gradient)
// The input gradient of a bias add is dy itself, so backward has nothing else to do.
#pragma once
#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct BiasKernel {
  static constexpr const char* op_name = "bias";
  const char* variant;
  void (*forward)(const ExecContext& ctx, Tensor& y, const Tensor& b);
  void (*backward)(const ExecContext& ctx, const Tensor& dy, Tensor& db);
};

}  // namespace titan
