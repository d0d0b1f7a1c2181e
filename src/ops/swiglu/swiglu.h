// SwiGLU (Qwen3MLP's act_fn(gate) * up with act = SiLU), on a fused gate/up buffer:
//   gu: [N, 2I] with gate = gu[:, :I], up = gu[:, I:] -> out: [N, I] = silu(gate) * up
//   backward: dgu[:, :I] = dout * up * silu'(gate), dgu[:, I:] = dout * silu(gate) (overwrite)
//   silu(g) = g * sigmoid(g), silu'(g) = sigmoid(g) * (1 + g * (1 - sigmoid(g)))
#pragma once
#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct SwiGLUKernel {
  static constexpr const char* op_name = "swiglu";
  const char* variant;
  void (*forward)(const Tensor& gu, Tensor& out);
  void (*backward)(const Tensor& gu, const Tensor& dout, Tensor& dgu);
};

}  // namespace titan
