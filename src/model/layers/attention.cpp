// The attention mixer, forward and backward side by side (shapes in decoder.h; T = B * S tokens,
// W = Q + 2K the fused q/k/v width).
//
// The layer reads and writes its fused buffers in place rather than copying parts out and back:
//   - the q/k norm reads q and k as strided row views of the qkv projection output [T, W], and
//     attention reads v from it the same way;
//   - in the backward, attention writes dq, dk and dv straight into the fused gradient dqkv
//     [T, W]; RoPE's and the q/k norm's backward then run in place on those views;
//   - the residual adds are inside other ops: o_proj and down_proj are linears with a residual
//     input (h = x + attn @ Wo^T in the GEMM's epilogue), and each RMSNorm backward adds its input
//     gradient into the residual stream's gradient (dx +=).
// With bf16 compute, the ops that produce a bf16 GEMM's input write it in bf16 directly (the
// input norms, SwiGLU and its backward), so no separate rounding pass runs over them.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/threading.h"
#include "model/decoder_layer.h"
#include "model/positions.h"
#include "ops/copy/copy_rows.h"

namespace titan {

using namespace layer_util;

// The attention mixer block: a.h [T, H] = x + o_proj(attention(rope(norm(q)), rope(norm(k)), v))
// of rmsnorm(x), with the saved activations in `a`; with a cache (generation), attention over it.
void DecoderModel::attention_forward(size_t l, const Tensor& x, LayerActs& a, int64_t B, int64_t S, Positions pos,
                                     InferenceState* cache) {
  const Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const Tensor& Wqkv = wbf_ ? wbf_->qkv[l] : L.w_qkv;
  const Tensor& Wo = wbf_ ? wbf_->o[l] : L.w_o;
  // Local heads and widths (model/tensor_parallel.h); Tr: the residual stream's rows on this rank.
  const int64_t T = B * S, Tr = x.dim(0), H = cfg_.hidden_size, Q = loc_.q, K = loc_.kv, D = cfg_.head_dim;
  const int64_t nh = loc_.heads, nkv = loc_.kv_heads;
  const float eps = float(cfg_.rms_norm_eps);
  const DType gemm_in = compute_ == DType::BF16 ? DType::BF16 : DType::F32;  // dtype of inputs only a GEMM reads
  a.xn1 = Tensor::empty({Tr, H}, gemm_in, dev());
  a.rstd1 = f32({Tr});
  k.rmsnorm->forward(exec_, x, L.w_in, eps, a.xn1, a.rstd1);
  a.xn1 = tp_gather_rows(a.xn1);  // sequence parallel: the projections read every token
  a.qkv = f32({T, Q + 2 * K});
  k.linear->forward(exec_, a.xn1, Wqkv, a.qkv, compute_);
  if (L.b_qkv.defined()) k.bias->forward(exec_, a.qkv, L.b_qkv);
  lora_forward_group(l, LoraGroup::Qkv, a.xn1, &a.qkv, a);
  // Per-head norm of q and k read in place from qkv, written to their own buffers (the backward
  // needs qkv as it was), then RoPE in place there. Without the q/k norm (llama, qwen2), q and k
  // are copied out of qkv for RoPE.
  a.q = f32({B, S, nh, D});
  a.k = f32({B, S, nkv, D});
  const RowView q = RowView::of(a.q, nh, D), kk = RowView::of(a.k, nkv, D);
  if (cfg_.has_qk_norm()) {
    a.rstd_q = f32({T * nh});
    a.rstd_k = f32({T * nkv});
    k.rmsnorm->forward_rows(exec_, RowView::columns(a.qkv, 0, nh, D), L.w_qn, eps, q, a.rstd_q);
    k.rmsnorm->forward_rows(exec_, RowView::columns(a.qkv, Q, nkv, D), L.w_kn, eps, kk, a.rstd_k);
  } else {
    take_columns(exec_, a.qkv, 0, a.q);
    take_columns(exec_, a.qkv, Q, a.k);
  }
  a.attn = f32({B, S, nh, D});
  if (cache) {
    attend_cached(l, a, B, S, *cache);  // generation: per-row positions, attention over the KV cache
  } else {
    rope_rows(exec_, *k.rope, false, q, S, pos, rope_);
    rope_rows(exec_, *k.rope, false, kk, S, pos, rope_);
    a.lse = f32({B, nh, S});
    const float scale = float(1.0 / std::sqrt(double(D)));
    if (pos.chunks)  // context parallelism: over the keys of every cp rank
      cp_attention_forward(*k.attention, q, kk, RowView::columns(a.qkv, Q + K, nkv, D), B, S, pos, scale, a.attn,
                           a.lse);
    else
      k.attention->forward_rows_seg(exec_, q, kk, RowView::columns(a.qkv, Q + K, nkv, D), S, pos.doc_start, scale,
                                    a.attn, a.lse);
  }
  a.attn = a.attn.view({T, Q});
  if (tp_.on()) {  // row-parallel: the partial sums reduced over tp, then the residual
    Tensor part = f32({T, H});
    k.linear->forward(exec_, a.attn, Wo, part, compute_);
    a.h = tp_reduce_rows(part);
    k.residual->forward(exec_, a.h, x, a.h);
  } else {
    a.h = f32({T, H});
    k.linear->forward_residual(exec_, a.attn, Wo, &x, a.h, compute_);  // h = x + attn @ Wo^T
  }
  lora_forward_group(l, LoraGroup::O, a.attn, &a.h, a);
}

// dx: on entry d(a.h), on exit d(x) of the attention block (parameter grads accumulate).
void DecoderModel::attention_backward(size_t l, const Tensor& x, LayerActs& a, Tensor& dx, int64_t B, int64_t S,
                                      Positions pos) {
  Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const Tensor& Wqkv = wbf_ ? wbf_->qkv[l] : L.w_qkv;
  const Tensor& Wo = wbf_ ? wbf_->o[l] : L.w_o;
  const int64_t T = B * S, H = cfg_.hidden_size, Q = loc_.q, K = loc_.kv, D = cfg_.head_dim;
  const int64_t nh = loc_.heads, nkv = loc_.kv_heads;
  // Attention block: h = x + o(attention(rope(norm(q)), rope(norm(k)), v))
  {
    Tensor dattn = f32({T, Q});
    const Tensor dh = tp_gather_rows(dx);  // sequence parallel: d(h) of every token
    k.linear->backward(exec_, a.attn, Wo, dh, &dattn, grad_or_null(L.g_o), compute_);
    lora_backward_group(l, LoraGroup::O, a.attn, a, dh, dattn);
    // dq, dk, dv land in their columns of the fused gradient; RoPE and the q/k norm go back in place.
    Tensor dqkv = f32({T, Q + 2 * K});
    const RowView dq = RowView::columns(dqkv, 0, nh, D), dk = RowView::columns(dqkv, Q, nkv, D);
    const float scale = float(1.0 / std::sqrt(double(D)));
    if (pos.chunks)
      cp_attention_backward(*k.attention, RowView::of(a.q, nh, D), RowView::of(a.k, nkv, D),
                            RowView::columns(a.qkv, Q + K, nkv, D), a.attn, a.lse, dattn, B, S, pos, scale, dq, dk,
                            RowView::columns(dqkv, Q + K, nkv, D));
    else
      k.attention->backward_rows_seg(exec_, RowView::of(a.q, nh, D), RowView::of(a.k, nkv, D),
                                     RowView::columns(a.qkv, Q + K, nkv, D), a.attn.view({B, S, nh, D}), a.lse,
                                     dattn.view({B, S, nh, D}), S, pos.doc_start, scale, dq, dk,
                                     RowView::columns(dqkv, Q + K, nkv, D));
    dattn = Tensor();
    rope_rows(exec_, *k.rope, true, dq, S, pos, rope_);
    rope_rows(exec_, *k.rope, true, dk, S, pos, rope_);
    if (cfg_.has_qk_norm() && tp_.on()) {  // each rank's heads: partial gradients of the norm weights
      Tensor pq = Tensor::zeros({D}, DType::F32, dev()), pk = Tensor::zeros({D}, DType::F32, dev());
      k.rmsnorm->backward_rows(exec_, RowView::columns(a.qkv, 0, nh, D), L.w_qn, a.rstd_q, dq, dq, pq, false);
      k.rmsnorm->backward_rows(exec_, RowView::columns(a.qkv, Q, nkv, D), L.w_kn, a.rstd_k, dk, dk, pk, false);
      tp_grad_sum(pq, L.g_qn);
      tp_grad_sum(pk, L.g_kn);
    } else if (cfg_.has_qk_norm()) {
      k.rmsnorm->backward_rows(exec_, RowView::columns(a.qkv, 0, nh, D), L.w_qn, a.rstd_q, dq, dq, L.g_qn, false);
      k.rmsnorm->backward_rows(exec_, RowView::columns(a.qkv, Q, nkv, D), L.w_kn, a.rstd_k, dk, dk, L.g_kn, false);
    }
    if (L.gb_qkv.defined()) k.bias->backward(exec_, dqkv, L.gb_qkv);
    Tensor dxn1 = f32({T, H});
    k.linear->backward(exec_, a.xn1, Wqkv, dqkv, &dxn1, grad_or_null(L.g_qkv), compute_);
    lora_backward_group(l, LoraGroup::Qkv, a.xn1, a, dqkv, dxn1);
    Tensor d = tp_reduce_rows(dxn1);  // column-parallel: the input gradient summed over tp
    if (tp_norm_grads_partial()) {
      Tensor part = Tensor::zeros({H}, DType::F32, dev());
      k.rmsnorm->backward_add(exec_, x, L.w_in, a.rstd1, d, dx, part);
      tp_grad_sum(part, L.g_in);
    } else {
      k.rmsnorm->backward_add(exec_, x, L.w_in, a.rstd1, d, dx, L.g_in);  // dx is now d(x)
    }
  }
}

}  // namespace titan
