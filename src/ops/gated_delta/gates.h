// The gates of Qwen3.5's Gated DeltaNet (transformers' Qwen3_5GatedDeltaNet) from the in_proj_b
// and in_proj_a outputs, per token t and value head h (in double, stored f32):
//   beta = sigmoid(b),  g = -exp(A_log) softplus(a + dt_bias)   (torch's softplus: threshold 20)
// Backward, from d(beta) and d(g):
//   db = dbeta beta (1 - beta),  da = dg (-exp(A_log)) sigmoid(a + dt_bias)   (overwritten)
//   d(dt_bias) += sum_t da,  d(A_log) += sum_t dg g   (undefined: frozen)
// b, a, db, da are [T, Hv] row views (n = T, h = 1, d = Hv) into the fused projection and its
// gradient; A_log, dt_bias: [Hv]; g, beta, dg, dbeta: contiguous f32 of T * Hv elements. CPU only.
#pragma once
#include "core/exec_context.h"
#include "core/tensor.h"
#include "ops/row_view.h"

namespace titan {

void delta_gates_forward(const ExecContext& ctx, const RowView& b, const RowView& a, const Tensor& a_log,
                         const Tensor& dt_bias, Tensor& g, Tensor& beta);

void delta_gates_backward(const ExecContext& ctx, const RowView& a, const Tensor& a_log, const Tensor& dt_bias,
                          const Tensor& g, const Tensor& beta, const Tensor& dg, const Tensor& dbeta, const RowView& db,
                          const RowView& da, Tensor& d_dt_bias, Tensor& d_a_log);

}  // namespace titan
