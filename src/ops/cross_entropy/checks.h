// Argument checks shared by the fused lm_head + cross-entropy variants (see cross_entropy.h).
#pragma once
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/op_checks.h"

namespace titan::ce_detail {

struct Dims {
  int64_t n, h, v;  // rows (tokens), hidden size, vocabulary size
};

// h: [N, H] (or [B, S, H], read as N = B*S rows) f32; w: [V, H] f32 (or bf16 with compute bf16);
// labels: N indices (any shape), each -100 or in [0, V); compute F32 or BF16.
inline Dims check_inputs(const Tensor& h, const Tensor& w, const Tensor& labels, DType compute) {
  opcheck::f32(h, "cross_entropy", "h");
  if (w.dtype() == DType::BF16)
    TITAN_CHECK(compute == DType::BF16, "cross_entropy: a bf16 'w' needs compute dtype bf16, got ",
                dtype_name(compute));
  else
    opcheck::f32(w, "cross_entropy", "w");
  opcheck::index(labels, "cross_entropy", "labels");
  TITAN_CHECK(h.ndim() >= 2 && h.dim(-1) > 0, "cross_entropy: 'h' must be [N, H] or [B, S, H] with H > 0, got ",
              h.str());
  TITAN_CHECK(w.ndim() == 2 && w.dim(1) == h.dim(-1) && w.dim(0) > 0,
              "cross_entropy: 'w' must be [V, H] with H = ", h.dim(-1), " and V > 0, got ", w.str());
  TITAN_CHECK(compute == DType::F32 || compute == DType::BF16, "cross_entropy: compute dtype must be f32 or bf16, got ",
              dtype_name(compute));
  const Dims d{h.numel() / h.dim(-1), h.dim(-1), w.dim(0)};
  opcheck::numel(labels, d.n, "cross_entropy", "labels");
  for (int64_t n = 0; n < d.n; ++n) {
    const int64_t l = opcheck::index_at(labels, n);
    TITAN_CHECK(l == kIgnoreIndex || (l >= 0 && l < d.v), "cross_entropy: label ", l, " at row ", n,
                " is outside the vocabulary [0, ", d.v, ") and is not the ignore index -100");
  }
  return d;
}

inline void check_logits_out(const Tensor& logits, const Dims& d) {
  opcheck::f32(logits, "cross_entropy", "logits_out");
  opcheck::numel(logits, d.n * d.v, "cross_entropy", "logits_out");
  if (d.n > 0) opcheck::last_dim(logits, d.v, "cross_entropy", "logits_out");
}

inline void check_grads(const Tensor& h, const Tensor& w, const Tensor& dh, const Tensor& dw) {
  opcheck::f32(dh, "cross_entropy", "dh");
  opcheck::same_shape(dh, h, "cross_entropy", "dh", "h");
  if (!dw.defined()) return;  // a frozen lm_head: no weight gradient
  TITAN_CHECK(w.dtype() == DType::F32, "cross_entropy: a bf16 'w' is frozen (dw must be undefined)");
  opcheck::f32(dw, "cross_entropy", "dw");
  opcheck::same_shape(dw, w, "cross_entropy", "dw", "w");
}

}  // namespace titan::ce_detail
