// Depthwise causal conv1d with SiLU, as Qwen3.5's Gated DeltaNet conv (transformers: nn.Conv1d(C, C,
// K, groups=C, padding=K-1, bias=False) cut to the sequence, then SiLU; causal_conv1d_update for decode):
//   x: [B, S, C], w: [C, K] (the Conv1d weight [C, 1, K]), a[t, c] = sum_j w[c, j] x[t - K + 1 + j, c],
//   y = silu(a): [B, S, C]
// x before the sequence is state_in [B, C, K - 1] (the previous K - 1 inputs, oldest first) when
// defined, else zero; state_out (optional) receives the last K - 1 inputs (decode carries it).
// Block-causal (seg [B * S] as the attention op takes it): inputs before a document's start are zero
// (state_in enters the row's first document only).
// Backward: dx (overwritten), dw += (accumulated), d_state_in (overwritten, when defined).
#pragma once
#include <cstdint>

#include "core/exec_context.h"
#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct CausalConv1dKernel {
  static constexpr const char* op_name = "causal_conv1d";
  const char* variant;
  void (*forward)(const ExecContext& ctx, const Tensor& x, const Tensor& w, const int64_t* seg,
                  const Tensor& state_in, Tensor& y, Tensor& state_out);
  void (*backward)(const ExecContext& ctx, const Tensor& x, const Tensor& w, const int64_t* seg,
                   const Tensor& state_in, const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& d_state_in);
};

namespace conv1d {
struct Dims {
  int64_t B, S, C, K;
};
Dims check(const Tensor& x, const Tensor& w, const int64_t* seg, const Tensor& state_in, const Tensor& y,
           const Tensor& state_out, const char* who);
// x at position t (may be negative: the state) of row b, channel c; 0 before the document start.
inline float input_at(const float* x, const float* st, const Dims& d, int64_t b, int64_t t, int64_t c,
                      int64_t doc_start) {
  if (t >= doc_start) return t >= 0 ? x[(b * d.S + t) * d.C + c] : 0.0f;
  if (doc_start > 0 || !st) return 0.0f;
  return st[(b * d.C + c) * (d.K - 1) + (d.K - 1 + t)];  // t in [-(K-1), 0)
}
}  // namespace conv1d
}  // namespace titan
