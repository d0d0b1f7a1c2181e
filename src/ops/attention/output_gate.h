// The output gate of Qwen3.5's full-attention layer (transformers' Qwen3_5Attention): the
// attention output times the sigmoid of a gate that q_proj computes beside each head's query,
// elementwise over [T, Q] f32 tensors:
//   forward:  gated = attn * s,  s = sigmoid(gate)   (in place: gate holds the logits, then gated)
//   backward: dattn = dgated s,  dgate = dgated attn s (1 - s)   (from the gate logits)
// All in f32, rows split over threads; dgate may alias gate. CPU only.
#pragma once
#include "core/exec_context.h"
#include "core/tensor.h"

namespace titan {

void output_gate_forward(const ExecContext& ctx, const Tensor& attn, Tensor& gate);
void output_gate_backward(const ExecContext& ctx, const Tensor& attn, const Tensor& gate, const Tensor& dgated,
                          Tensor& dattn, Tensor& dgate);

}  // namespace titan
