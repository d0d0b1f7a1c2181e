// The shared expert's gate of Qwen3.5-MoE (transformers' Qwen3_5MoeSparseMoeBlock:
// shared_expert_gate): one sigmoid per token scales the shared expert's output e into the block's
// output y. x: [T, H] the block's normed input, w: [H] the gate's weight, all f32.
//   forward:   z[t] = extra[t] + x[t] . w (in double),  s[t] = sigmoid(z[t]),  y[t] += s[t] e[t]
//   backward (the expert's side): de[t] = s[t] dy[t],  dz[t] = (dy[t] . e[t]) s (1 - s)
//   backward (the gate's input):  dx[t] += dxe[t] + dz[t] w,  dw += sum_t dz[t] x[t] (in double)
// extra: [T] (the gate's LoRA adapter, or undefined); dxe: the shared expert's own input gradient.
// CPU only.
#pragma once
#include "core/exec_context.h"
#include "core/tensor.h"

namespace titan {

void shared_gate_forward(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& extra,
                         const Tensor& e, Tensor& y, Tensor& s);
void shared_gate_backward(const ExecContext& ctx, const Tensor& dy, const Tensor& e, const Tensor& s, Tensor& de,
                          Tensor& dz);
// dw undefined: frozen.
void shared_gate_backward_input(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dz,
                                const Tensor& dxe, Tensor& dx, Tensor& dw);

}  // namespace titan
