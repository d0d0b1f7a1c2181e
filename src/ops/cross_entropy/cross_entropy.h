// Cross-entropy fused with the lm_head, in chunks of rows, so [N, V] f32 logits are never held:
//   logits = h @ W^T (h: [N, H] or [B, S, H] as N = B*S rows, W: [V, H]); loss_n = logsumexp(logits_n) - logits_n[label_n]
//   labels: [N] i32/i64; label -100 is ignored; any other label must be in [0, V) (checked).
// forward returns the SUM of losses over non-ignored rows (the caller divides by the count, which
// is known before the pass, so the backward scale can be given up front).
// forward_backward also writes dh = grad_scale * dL/dh (overwrite) and dW += grad_scale * dL/dW,
// with dL/dlogits = softmax - onehot(label) for counted rows and 0 for ignored rows.
// logits_out (optional, forward only, for `titan score --dump-logits`): [N, V] f32.
// W is f32, or bf16 with compute = bf16 (a bf16-stored head, read as it is: the same GEMM inputs
// as an f32 W of those values rounded per call); dW then must be undefined (a frozen head).
#pragma once
#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

constexpr int64_t kIgnoreIndex = -100;

struct CrossEntropyKernel {
  static constexpr const char* op_name = "cross_entropy";
  const char* variant;
  double (*forward)(const ExecContext& ctx, const Tensor& h, const Tensor& w, const Tensor& labels, Tensor* logits_out,
                    DType compute);
  double (*forward_backward)(const ExecContext& ctx, const Tensor& h, const Tensor& w, const Tensor& labels,
                             float grad_scale, Tensor& dh, Tensor& dw, DType compute);
};

int64_t count_labels(const Tensor& labels);  // rows with label != -100

}  // namespace titan
