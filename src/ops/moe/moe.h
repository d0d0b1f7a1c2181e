// Sparse mixture-of-experts block with the semantics of HF transformers' Qwen3MoeSparseMoeBlock
// (router Qwen3MoeTopKRouter + experts Qwen3MoeExperts), no shared expert.
//
// Shapes: T tokens, H hidden, E experts, I moe_intermediate_size, K = top_k.
//   x        [T, H]      f32
//   router   [E, H]      f32   (HF mlp.gate.weight)
//   gate_up  [E, 2I, H]  f32   (HF mlp.experts.gate_up_proj: rows [0, I) gate, [I, 2I) up)
//   down     [E, H, I]   f32   (HF mlp.experts.down_proj)
//   bias     [E]         f32, optional: torchtitan's expert bias for aux-loss-free balancing
//
// Forward, per token t:
//   logits[t] = router @ x[t]                    (no bias; HF router_logits, f32)
//   p[t]      = softmax(logits[t])               (f32 semantics, computed with double sums)
//   sel[t]    = the K experts with the largest p[t, e] + bias[e] (bias only steers the choice),
//               in descending order; ties go to the LOWER expert index. (torch.topk on CPU picks
//               an implementation-defined member of a tie: topk([.1,.3,.3,.3], 2) -> [2, 3]; we
//               pin the rule so that routing is deterministic and testable.)
//   w[t, k]   = p[t, sel[t,k]], divided by sum_k p[t, sel[t,k]] when norm_topk_prob
//   y[t]      = sum_k w[t,k] * down[e] @ (silu(gate[e] @ x[t]) * (up[e] @ x[t])),  e = sel[t,k]
//
// Backward (selection is constant):
//   dw[t,k]   = dy[t] . expert_out[t,k]
//   dp[sel]   = norm ? (dw - sum_j dw_j w_j) / S : dw,  S = sum_k p[t, sel[t,k]];  dp = 0 elsewhere
//   dlogits   = p * (dp - sum_e p_e dp_e) + dlogits_extra   (extra: e.g. the aux-loss gradient)
//   drouter  += dlogits^T @ x;  dx = dlogits @ router + sum_k (expert input gradient)
//   dgate_up[e] += dgu^T @ x_e;  ddown[e] += (w * dy)^T @ act   (accumulate, like nn.Linear grads)
//
// compute: F32, or BF16 to round the expert GEMM inputs (x, gate_up, down, activations and their
// gradients) to bf16 with f32 accumulation. With compute BF16, gate_up and down may be given as
// BF16 tensors, used as is (a trainer rounds each weight once per step instead of once per call);
// the results are the same as with their f32 originals. The router always runs in f32: a bf16 router would
// change which experts are chosen, not just the precision of the result.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/kernel_shape.h"
#include "ops/registry.h"

namespace titan {

struct MoEArgs {
  const Tensor* x = nullptr;        // [T, H]
  const Tensor* router = nullptr;   // [E, H]
  const Tensor* gate_up = nullptr;  // [E, 2I, H]
  const Tensor* down = nullptr;     // [E, H, I]
  const Tensor* bias = nullptr;     // [E] or null
  int64_t top_k = 0;
  bool norm_topk_prob = true;
  DType compute = DType::F32;
};

// What forward keeps for backward. The routing fields are the same in every variant; `acts` and
// `slot_pos` are owned by the variant that wrote them (pass the same variant's saved state back).
struct MoESaved {
  Tensor logits;             // [T, E] f32 router logits (the input of the auxiliary loss)
  Tensor topk_idx;           // [T, K] i32 selected experts, descending score, ties lowest index
  Tensor topk_w;             // [T, K] f32 routing weights (renormalized when norm_topk_prob)
  Tensor tokens_per_expert;  // [E] i64 number of (token, k) slots routed to each expert
  Tensor acts;               // variant-private (grouped_gemm: gate/up pre-activations, [T*K, 2I])
  Tensor slot_pos;           // variant-private (grouped_gemm: row of slot t*K+k in expert order)
  // Expert parallelism (expert_parallel.h), on the rank that owns the experts: the rows it
  // received [rows, H] f32 and their routing weights [rows], in its padded expert-group layout,
  // and how many rows each ep rank sent for each local expert [ep, E / ep] i64.
  Tensor ep_rows, ep_w, ep_counts;
};

struct MoEGrads {
  Tensor* dx = nullptr;                    // [T, H] overwritten (skipped when null)
  Tensor* drouter = nullptr;               // [E, H] accumulated into
  Tensor* dgate_up = nullptr;              // [E, 2I, H] accumulated into
  Tensor* ddown = nullptr;                 // [E, H, I] accumulated into
  const Tensor* dlogits_extra = nullptr;   // [T, E] added to dL/dlogits (aux loss), or null
};

struct MoEKernel {
  static constexpr const char* op_name = "moe";
  const char* variant;
  void (*forward)(const ExecContext& ctx, const MoEArgs& a, Tensor& y, MoESaved& saved);  // y [T, H] f32, overwritten
  void (*backward)(const ExecContext& ctx, const MoEArgs& a, const MoESaved& saved, const Tensor& dy,
                   const MoEGrads& g);
  KernelConstraint constraint = nullptr;
};

// Routing shared by the variants: the top-k choice of one token from its f32 probabilities
// (p + bias ranks, ties to the lower index), weights renormalized when asked.
void moe_route_token(const float* p, const float* bias, int64_t E, int64_t K, bool norm, int32_t* idx, float* w);
// Row softmax of f32 logits with double sums, rounded to f32 (the probabilities both variants use).
void moe_softmax_row(const float* logits, int64_t E, float* p);
// The router-logit gradient of one token (both variants): through the top-k renormalization (when
// norm) and the softmax, the selection held constant. logits [E], sel/w/dw [K] (the chosen experts,
// their weights and dL/dweight), extra [E] or null (added, e.g. the aux loss's gradient);
// p [E] and dp [E] are scratch; writes dlogits [E].
void moe_router_grad_row(const float* logits, const int32_t* sel, const float* w, const double* dw, int64_t E,
                         int64_t K, bool norm, const float* extra, float* p, double* dp, double* dlogits);

// HF transformers' load_balancing_loss_func over the router logits of all MoE layers (no mask):
//   N = total rows over layers; p = softmax(logits) per row; sel = top_k of p (ties lowest index)
//   f_e = (count of e in sel over all rows) / N,  P_e = (sum of p[:, e] over all rows) / N
//   loss = E * sum_e f_e * P_e
// Returns the loss. When dlogits is given (one [T_l, E] f32 tensor per layer, overwritten), also
// writes scale * dloss/dlogits (the counts are constant):
//   dloss/dp[n, e] = E * f_e / N;   dlogits[n] = p[n] * (g - sum_e p[n, e] g_e), g = dloss/dp[n]
double moe_aux_loss(const std::vector<const Tensor*>& logits, int64_t top_k, std::vector<Tensor*>* dlogits = nullptr,
                    float scale = 1.f);

// torchtitan's auxiliary-loss-free balancing (applied once per optimizer step, before it):
//   delta = coeff * sign(mean(tokens_per_expert) - tokens_per_expert);  bias += delta - mean(delta)
// tokens_per_expert: [E] i64 or f32 (summed over the step's micro-batches); bias: [E] f32.
void moe_update_expert_bias(Tensor& bias, const Tensor& tokens_per_expert, float coeff);

// Validates the argument shapes; returns {T, H, E, I, K}. ep > 1: gate_up and down hold this
// rank's E / ep experts (expert parallelism, expert_parallel.h), E = the router's rows.
struct MoEDims {
  int64_t T, H, E, I, K;
};
MoEDims moe_check_args(const MoEArgs& a, const char* variant, int64_t ep = 1);
// The gradient buffers' shapes against the arguments and the saved routing.
void moe_check_grads(const MoEArgs& a, const MoESaved& s, const MoEGrads& g);

// Pieces of the permuted variants (grouped_gemm.cpp, expert_parallel.cpp), in ops/moe/slots.cpp:
// Step 1 of the forward: s.logits = x @ router^T (f32), the top-k choice and weights of every
// token, s.tokens_per_expert = how many slots each expert got.
void moe_route(const ExecContext& ctx, const MoEArgs& a, int64_t T, int64_t H, int64_t E, int64_t K, MoESaved& s);
// y[t] = sum_k w[t, k] * out[row[t K + k]] (rows of H floats), summed in k order.
void moe_combine(const float* w, const int32_t* row, const float* out, int64_t T, int64_t H, int64_t K, float* y);
// The end of the backward: dL/dw of every slot (dw [T K]) gives the router-logit gradient (plus
// g.dlogits_extra); g.drouter += dlogits^T x; g.dx = dlogits @ router + sum_k dx_rows[row[t K + k]].
void moe_router_and_input_grads(const ExecContext& ctx, const MoEArgs& a, const MoESaved& s, const double* dw,
                                const float* dx_rows, const int32_t* row, const MoEGrads& g);

}  // namespace titan
