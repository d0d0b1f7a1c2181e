// Causal grouped-query attention (HF eager semantics, no dropout, no mask beyond causality):
//   q: [B, S, Hq, D], k, v: [B, S, Hkv, D], Hq % Hkv == 0, query head h uses kv head h / (Hq/Hkv)
//   out[b, s, h] = sum_{t <= s} softmax_t(scale * q.k_t) v_t
//   lse: [B, Hq, S] f32, log-sum-exp of the scaled scores per query (saved for backward)
//   backward: dq, dk, dv (overwrite), with the flash-attention recurrence
//     dP = dO V^T, D_s = sum(dO_s * O_s), dS = P * (dP - D), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO
//
// The kernels take q, k, v and their gradients as row views (ops/row_view.h) of B * S token rows
// (S = seq): the rows may be strided, so v is read from the fused qkv buffer and dv written into
// the fused gradient in place. out, dout [B, S, Hq, D] and lse are contiguous and defined.
// The 4-d tensor forms below check their arguments the same way, allocate undefined outputs and
// call the row forms.
//
// Block-causal (packed documents, ops/attention/segments.h): the *_segments forms take seg [B * S],
// the start of each token's document within its sequence; query s sees keys seg[s] <= t <= s.
// With seg == nullptr they are the causal forms.
//
// Suffix (context parallelism, model/context_parallel.h): the *_suffix forms take queries that are
// the last Sq positions of sequences of Sk >= Sq keys: q rows [B * Sq], k and v rows [B * Sk],
// out [B, Sq, Hq, D], lse [B, Hq, Sq]; query i sees keys t <= Sk - Sq + i (dk, dv [B * Sk] rows,
// overwritten). With Sq == Sk they equal the causal forms.
#pragma once
#include <string>

#include "core/tensor.h"
#include "ops/attention/segments.h"
#include "ops/attention/shape.h"
#include "ops/registry.h"
#include "ops/row_view.h"

namespace titan {

struct AttentionKernel {
  static constexpr const char* op_name = "attention";
  const char* variant;
  void (*forward_rows)(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, int64_t seq,
                       float scale, Tensor& out, Tensor& lse);
  void (*backward_rows)(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, const Tensor& out,
                        const Tensor& lse, const Tensor& dout, int64_t seq, float scale, const RowView& dq,
                        const RowView& dk, const RowView& dv);
  // Block-causal forms (seg never null here; the members below route a null seg to the causal ones).
  void (*forward_segments)(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, int64_t seq,
                           const int64_t* seg, float scale, Tensor& out, Tensor& lse) = nullptr;
  void (*backward_segments)(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v,
                            const Tensor& out, const Tensor& lse, const Tensor& dout, int64_t seq, const int64_t* seg,
                            float scale, const RowView& dq, const RowView& dk, const RowView& dv) = nullptr;
  void (*forward_suffix)(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, int64_t sq,
                         int64_t sk, float scale, Tensor& out, Tensor& lse) = nullptr;
  void (*backward_suffix)(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v,
                          const Tensor& out, const Tensor& lse, const Tensor& dout, int64_t sq, int64_t sk, float scale,
                          const RowView& dq, const RowView& dk, const RowView& dv) = nullptr;

  void forward_rows_suffix(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, int64_t sq,
                           int64_t sk, float scale, Tensor& out, Tensor& lse) const {
    TITAN_CHECK(forward_suffix, who("forward"), ": context-parallel (suffix) attention is not implemented by this variant");
    forward_suffix(ctx, q, k, v, sq, sk, scale, out, lse);
  }
  void backward_rows_suffix(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v,
                            const Tensor& out, const Tensor& lse, const Tensor& dout, int64_t sq, int64_t sk,
                            float scale, const RowView& dq, const RowView& dk, const RowView& dv) const {
    TITAN_CHECK(backward_suffix, who("backward"),
                ": context-parallel (suffix) attention is not implemented by this variant");
    backward_suffix(ctx, q, k, v, out, lse, dout, sq, sk, scale, dq, dk, dv);
  }

  void forward_rows_seg(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v, int64_t seq,
                        const int64_t* seg, float scale, Tensor& out, Tensor& lse) const {
    if (!seg) return forward_rows(ctx, q, k, v, seq, scale, out, lse);
    TITAN_CHECK(forward_segments, who("forward"), ": block-causal attention is not implemented by this variant");
    forward_segments(ctx, q, k, v, seq, seg, scale, out, lse);
  }
  void backward_rows_seg(const ExecContext& ctx, const RowView& q, const RowView& k, const RowView& v,
                         const Tensor& out, const Tensor& lse, const Tensor& dout, int64_t seq, const int64_t* seg,
                         float scale, const RowView& dq, const RowView& dk, const RowView& dv) const {
    if (!seg) return backward_rows(ctx, q, k, v, out, lse, dout, seq, scale, dq, dk, dv);
    TITAN_CHECK(backward_segments, who("backward"), ": block-causal attention is not implemented by this variant");
    backward_segments(ctx, q, k, v, out, lse, dout, seq, seg, scale, dq, dk, dv);
  }

  void forward(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, float scale, Tensor& out,
               Tensor& lse, const int64_t* seg = nullptr) const {
    const attention::Dims d = attention::check_forward(q, k, v, scale, out, lse, who("forward").c_str());
    forward_rows_seg(ctx, RowView::of(q, d.Hq, d.D), RowView::of(k, d.Hkv, d.D), RowView::of(v, d.Hkv, d.D), d.S, seg,
                     scale, out, lse);
  }
  void backward(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                const Tensor& lse, const Tensor& dout, float scale, Tensor& dq, Tensor& dk, Tensor& dv,
                const int64_t* seg = nullptr) const {
    const attention::Dims d =
        attention::check_backward(q, k, v, out, lse, dout, scale, dq, dk, dv, who("backward").c_str());
    backward_rows_seg(ctx, RowView::of(q, d.Hq, d.D), RowView::of(k, d.Hkv, d.D), RowView::of(v, d.Hkv, d.D), out, lse,
                      dout, d.S, seg, scale, RowView::of(dq, d.Hq, d.D), RowView::of(dk, d.Hkv, d.D),
                      RowView::of(dv, d.Hkv, d.D));
  }

 private:
  std::string who(const char* dir) const { return std::string("attention.") + variant + " " + dir; }
};

}  // namespace titan
