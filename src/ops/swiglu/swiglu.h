// SwiGLU (Qwen3MLP's act_fn(gate) * up with act = SiLU), on a fused gate/up buffer:
//   gu: [N, 2I] with gate = gu[:, :I], up = gu[:, I:] -> out: [N, I] = silu(gate) * up
//   backward: dgu[:, :I] = dout * up * silu'(gate), dgu[:, I:] = dout * silu(gate) (overwrite)
//   silu(g) = g * sigmoid(g), silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g)))
// out and dgu may be BF16: then they hold the bf16 roundings (to nearest even) of the f32
// results, written for the bf16 GEMM that reads them next (down_proj's input in the forward,
// gate/up's output gradient in the backward), so no separate rounding pass runs.
#pragma once
#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct SwiGLUKernel {
  static constexpr const char* op_name = "swiglu";
  const char* variant;
  void (*forward)(const ExecContext& ctx, const Tensor& gu, Tensor& out);
  void (*backward)(const ExecContext& ctx, const Tensor& gu, const Tensor& dout, Tensor& dgu);
};

}  // namespace titan
