// Causal grouped-query attention (HF eager semantics, no dropout, no mask beyond causality):
//   q: [B, S, Hq, D], k, v: [B, S, Hkv, D], Hq % Hkv == 0, query head h uses kv head h / (Hq/Hkv)
//   out[b, s, h] = sum_{t <= s} softmax_t(scale * q.k_t) v_t
//   lse: [B, Hq, S] f32, log-sum-exp of the scaled scores per query (saved for backward)
//   backward: dq, dk, dv (overwrite), with the flash-attention recurrence
//     dP = dO V^T, D_s = sum(dO_s * O_s), dS = P * (dP - D), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO
#pragma once
#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct AttentionKernel {
  static constexpr const char* op_name = "attention";
  const char* variant;
  void (*forward)(const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out, Tensor& lse);
  void (*backward)(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out, const Tensor& lse,
                   const Tensor& dout, float scale, Tensor& dq, Tensor& dk, Tensor& dv);
};

}  // namespace titan
