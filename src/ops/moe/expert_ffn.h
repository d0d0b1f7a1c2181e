// The experts' SwiGLU FFN on rows already grouped by expert: the part of the MoE block that the
// single-process grouped-GEMM variant (grouped_gemm.cpp) and expert parallelism
// (expert_parallel.h: each rank runs the rows dispatched to its local experts) share.
//
// Layout: expert e owns rows [off[e], off[e] + pad[e]) of a [rows, .] matrix; its first count[e]
// rows are real (token, k) slots, the rest zero padding. pad[e] is count[e] rounded up to
// kExpertRowAlign: the CPU GEMM caches one compiled primitive per shape, and padding keeps the
// number of distinct shapes small however the tokens fall, at a cost of under kExpertRowAlign
// rows per expert.
//
//   forward : gu = x_e @ gate_up[e]^T [2I per row]; act = silu(g) * u; out = act @ down[e]^T
//   backward: dA = dy_e @ down[e] (the gradient of act before the routing weight w of the row);
//             dw[row] = dA . act (double); da = w dA through the SwiGLU gives dgu;
//             ddown[e] += (w dy)_e^T @ act_e; dgate_up[e] += dgu_e^T @ x_e; dx_e = dgu_e @ gate_up[e]
//
// compute BF16 rounds the GEMM inputs (rows, weights, activations, their gradients) to bf16 with
// f32 accumulation; bf16 weights are used as they are. Every reduction has a fixed order (GEMMs per
// expert), so results do not depend on the thread count as long as the GEMM's do not.
#pragma once
#include <cstdint>
#include <vector>

#include "core/exec_context.h"
#include "core/tensor.h"

namespace titan {

inline constexpr int64_t kExpertRowAlign = 16;

struct ExpertGroups {
  std::vector<int64_t> count, pad, off;
  int64_t rows = 0;  // sum of pad
  ExpertGroups(const int64_t* counts, int64_t experts);
  int64_t experts() const { return int64_t(count.size()); }
};

// xp [G.rows, H] f32 (padding rows zero); gate_up [E, 2I, H], down [E, H, I] (f32, or bf16 with
// compute BF16); E = G.experts(). Writes gu [G.rows, 2I] f32 (the pre-activations, kept for the
// backward) and out [G.rows, H] f32 (padding rows: zero inputs give zero outputs).
void expert_ffn_forward(const ExecContext& ctx, const Tensor& xp, const ExpertGroups& G, const Tensor& gate_up,
                        const Tensor& down, DType compute, Tensor& gu, Tensor& out);

// dy [G.rows, H] f32: dL/d(out row), zero on padding rows; OVERWRITTEN with dL/d(x row) (which
// includes the row's routing weight). w [G.rows] f32: each row's routing weight (any value on
// padding rows). dw [G.rows] (resized): dL/dw of each row. dgate_up / ddown (f32, may be null)
// are accumulated into.
void expert_ffn_backward(const ExecContext& ctx, const Tensor& xp, const ExpertGroups& G, const Tensor& gate_up,
                         const Tensor& down, DType compute, const Tensor& gu, const float* w, Tensor& dy,
                         std::vector<double>& dw, Tensor* dgate_up, Tensor* ddown);

}  // namespace titan
