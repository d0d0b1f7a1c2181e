// Qwen3.5's full-attention mixer (transformers' Qwen3_5Attention), forward and backward:
//   qkv = xn1 @ [q_proj; k_proj; v_proj]^T, q_proj's rows giving each head its query then its
//   output gate ([T, heads, 2 D] -> query [.., :D], gate [.., D:]);
//   q, k <- zero-centred per-head RMSNorm (1 + q_norm / k_norm), then RoPE on the first
//   rotary_dim = head_dim * partial_rotary_factor of each head (rotate_half within that part);
//   attn = softmax attention (GQA, causal or block-causal); gated = attn * sigmoid(gate);
//   h = x + gated @ o_proj^T.
// LoRA (model/lora.h) adds into the fused qkv output (q_proj's adapter covers its 2 Q rows, query
// and gate interleaved per head, as PEFT's adapter on HF's q_proj does) and into h (o_proj).
// Tensor parallelism (model/tensor_parallel.h): whole KV groups per rank, as the plain attention
// layer (q_proj's rows per head carry its query and gate together), o_proj row-parallel.
// The attention kernel is the one of the plain attention layer; the query and gate are copied
// out of the fused projection (they interleave per head), k and v read in place.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/threading.h"
#include "model/decoder_layer.h"
#include "model/inference_state.h"
#include "ops/attention/cached.h"
#include "ops/attention/output_gate.h"
#include "ops/rope/partial.h"

namespace titan {

using namespace layer_util;

namespace {

// The position of each of n token rows (rope_partial's pos).
template <class PosOf>
std::vector<int64_t> row_positions(int64_t n, PosOf pos_of) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) p[size_t(r)] = pos_of(r);
  return p;
}

}  // namespace

void DecoderModel::gated_attention_forward(size_t l, const Tensor& x, LayerActs& a, int64_t B, int64_t S,
                                           Positions pos, InferenceState* cache) {
  const Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const Tensor& Wqkv = wbf_ ? wbf_->qkv[l] : L.w_qkv;
  const Tensor& Wo = wbf_ ? wbf_->o[l] : L.w_o;
  // This rank's heads (model/tensor_parallel.h: whole KV groups and the query heads that read them).
  const int64_t T = B * S, H = cfg_.hidden_size, Q = loc_.q, K = loc_.kv, D = cfg_.head_dim;
  const int64_t nh = loc_.heads, nkv = loc_.kv_heads, W = 2 * Q + 2 * K;
  const int64_t rd = cfg_.rotary_dim();
  const float eps = float(cfg_.rms_norm_eps);
  a.xn1 = Tensor::empty({x.dim(0), H}, gemm_input_dtype(compute_));  // this rank's rows (sequence parallel)
  a.rstd1 = f32({x.dim(0)});
  k.rmsnorm->forward(exec_, x, norm_weight(L.w_in), eps, a.xn1, a.rstd1);
  a.xn1 = tp_gather_rows(a.xn1);  // sequence parallel: the projections read every token
  a.qkv = f32({T, W});
  k.linear->forward(exec_, a.xn1, Wqkv, a.qkv, compute_);
  lora_forward_group(l, LoraGroup::Qkv, a.xn1, &a.qkv, a);  // q_proj's adapter: query and gate rows alike
  // query and gate out of q_proj's per-head [query | gate] pairs
  Tensor qraw = f32({T, nh, D});
  a.gated = f32({T, Q});  // the gate logits for now; gated output below
  {
    const float* s = a.qkv.data<float>();
    float* qd = qraw.data<float>();
    float* gd = a.gated.data<float>();
    parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t h = 0; h < nh; ++h) {
          std::memcpy(qd + (t * nh + h) * D, s + t * W + h * 2 * D, size_t(D) * sizeof(float));
          std::memcpy(gd + (t * nh + h) * D, s + t * W + h * 2 * D + D, size_t(D) * sizeof(float));
        }
    });
  }
  a.q = f32({B, S, nh, D});
  a.k = f32({B, S, nkv, D});
  a.rstd_q = f32({T * nh});
  a.rstd_k = f32({T * nkv});
  const RowView q = RowView::of(a.q, nh, D), kk = RowView::of(a.k, nkv, D);
  k.rmsnorm->forward_rows(exec_, RowView::of(qraw, nh, D), norm_weight(L.w_qn), eps, q, a.rstd_q);
  k.rmsnorm->forward_rows(exec_, RowView::columns(a.qkv, 2 * Q, nkv, D), norm_weight(L.w_kn), eps, kk, a.rstd_k);
  a.attn = f32({B, S, nh, D});
  const float scale = float(1.0 / std::sqrt(double(D)));
  if (cache) {
    // Generation: each row's real columns sit at positions column - first[b]; the new keys and
    // values join the cache, the queries attend over it (padding masked).
    InferenceState& c = *cache;
    const int64_t cap = c.capacity();
    TITAN_ASSERT(c.rows == B && c.len + S <= cap, "inference state cannot take ", B, " x ", S, " more");
    // (padding columns at 0: never attended to, their outputs never read)
    auto pos_of = [&](int64_t row) { return std::max<int64_t>(0, c.len + row % S - c.first[size_t(row / S)]); };
    const std::vector<int64_t> rp = row_positions(T, pos_of);
    rope_partial(exec_, q, rd, rope_, rp.data(), false);
    rope_partial(exec_, kk, rd, rope_, rp.data(), false);
    LayerState& st = c.layers[l];
    c.append_kv(l, a.k.data<float>(), K, a.qkv.data<float>() + 2 * Q + K, W, S);
    if (c.len > 0)
      attention_cached(q, st.k, st.v, c.first.data(), c.len + S, S, scale, a.attn);
    else  // the prompt: attention_cached takes no query inside a row's padding
      prefill_attention(l, a.q, a.k, a.qkv, 2 * Q + K, a.attn, B, S, c);
  } else {
    auto pos_of = [&](int64_t row) {
      const int64_t s = row % S;
      return pos.doc_start ? s - pos.doc_start[row] : pos.start + s;
    };
    const std::vector<int64_t> rp = row_positions(T, pos_of);
    rope_partial(exec_, q, rd, rope_, rp.data(), false);
    rope_partial(exec_, kk, rd, rope_, rp.data(), false);
    a.lse = f32({B, nh, S});
    k.attention->forward_rows_seg(exec_, q, kk, RowView::columns(a.qkv, 2 * Q + K, nkv, D), S, pos.doc_start, scale,
                                  a.attn, a.lse);
  }
  a.attn = a.attn.view({T, Q});
  output_gate_forward(exec_, a.attn, a.gated);  // gate logits -> attn * sigmoid(gate)
  if (tp_.on()) {  // row-parallel o_proj: the partial sums reduced over tp, then the residual
    Tensor part = f32({T, H});
    k.linear->forward(exec_, a.gated, Wo, part, compute_);
    a.h = tp_reduce_rows(part);
    k.residual->forward(exec_, a.h, x, a.h);
  } else {
    a.h = f32({T, H});
    k.linear->forward_residual(exec_, a.gated, Wo, &x, a.h, compute_);
  }
  lora_forward_group(l, LoraGroup::O, a.gated, &a.h, a);
}

void DecoderModel::gated_attention_backward(size_t l, const Tensor& x, LayerActs& a, Tensor& dx, int64_t B,
                                            int64_t S, Positions pos) {
  Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const Tensor& Wqkv = wbf_ ? wbf_->qkv[l] : L.w_qkv;
  const Tensor& Wo = wbf_ ? wbf_->o[l] : L.w_o;
  // This rank's heads (model/tensor_parallel.h: whole KV groups and the query heads that read them).
  const int64_t T = B * S, H = cfg_.hidden_size, Q = loc_.q, K = loc_.kv, D = cfg_.head_dim;
  const int64_t nh = loc_.heads, nkv = loc_.kv_heads, W = 2 * Q + 2 * K;
  const int64_t rd = cfg_.rotary_dim();
  const float scale = float(1.0 / std::sqrt(double(D)));
  Tensor dgated = f32({T, Q});
  const Tensor dh = tp_gather_rows(dx);  // sequence parallel: d(h) of every token
  k.linear->backward(exec_, a.gated, Wo, dh, &dgated, grad_or_null(L.g_o), compute_);
  lora_backward_group(l, LoraGroup::O, a.gated, a, dh, dgated);
  a.gated = Tensor();
  // gated = attn * sigmoid(gate): d(attn) = d(gated) s, d(gate) = d(gated) attn s (1 - s), from the
  // gate logits copied out of q_proj's columns into dgate (the op overwrites them in place)
  Tensor dattn = f32({T, Q}), dgate = f32({T, Q});
  {
    const float* s = a.qkv.data<float>();
    float* gd = dgate.data<float>();
    parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t h = 0; h < nh; ++h)
          std::memcpy(gd + (t * nh + h) * D, s + t * W + h * 2 * D + D, size_t(D) * sizeof(float));
    });
  }
  output_gate_backward(exec_, a.attn, dgate, dgated, dattn, dgate);
  dgated = Tensor();
  Tensor dqkv = f32({T, W});
  Tensor dq = f32({B, S, nh, D});
  const RowView dqv = RowView::of(dq, nh, D), dk = RowView::columns(dqkv, 2 * Q, nkv, D);
  k.attention->backward_rows_seg(exec_, RowView::of(a.q, nh, D), RowView::of(a.k, nkv, D),
                                 RowView::columns(a.qkv, 2 * Q + K, nkv, D), a.attn.view({B, S, nh, D}), a.lse,
                                 dattn.view({B, S, nh, D}), S, pos.doc_start, scale, dqv, dk,
                                 RowView::columns(dqkv, 2 * Q + K, nkv, D));
  dattn = Tensor();
  auto pos_of = [&](int64_t row) {
    const int64_t s = row % S;
    return pos.doc_start ? s - pos.doc_start[row] : pos.start + s;
  };
  const std::vector<int64_t> rp = row_positions(T, pos_of);
  rope_partial(exec_, dqv, rd, rope_, rp.data(), true);
  rope_partial(exec_, dk, rd, rope_, rp.data(), true);
  // q norm backward from the raw query (copied out of qkv again), into its q_proj columns
  Tensor qraw = f32({T, nh, D}), dqraw = f32({T, nh, D});
  {
    const float* s = a.qkv.data<float>();
    float* qd = qraw.data<float>();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < nh; ++h)
        std::memcpy(qd + (t * nh + h) * D, s + t * W + h * 2 * D, size_t(D) * sizeof(float));
  }
  // With tensor parallelism the q/k norm weights' gradients from this rank's heads are partial
  // sums, reduced over tp.
  Tensor pq, pk;
  if (tp_.on()) pq = Tensor::zeros({D}, DType::F32), pk = Tensor::zeros({D}, DType::F32);
  k.rmsnorm->backward_rows(exec_, RowView::of(qraw, nh, D), norm_weight(L.w_qn), a.rstd_q, dqv,
                           RowView::of(dqraw, nh, D), tp_.on() ? pq : L.g_qn, false);
  k.rmsnorm->backward_rows(exec_, RowView::columns(a.qkv, 2 * Q, nkv, D), norm_weight(L.w_kn), a.rstd_k, dk, dk,
                           tp_.on() ? pk : L.g_kn, false);
  if (tp_.on()) {
    tp_grad_sum(pq, L.g_qn);
    tp_grad_sum(pk, L.g_kn);
  }
  {
    float* d = dqkv.data<float>();
    const float* dqp = dqraw.data<float>();
    const float* dgp = dgate.data<float>();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < nh; ++h) {
        std::memcpy(d + t * W + h * 2 * D, dqp + (t * nh + h) * D, size_t(D) * sizeof(float));
        std::memcpy(d + t * W + h * 2 * D + D, dgp + (t * nh + h) * D, size_t(D) * sizeof(float));
      }
  }
  Tensor dxn1 = f32({T, H});
  k.linear->backward(exec_, a.xn1, Wqkv, dqkv, &dxn1, grad_or_null(L.g_qkv), compute_);
  lora_backward_group(l, LoraGroup::Qkv, a.xn1, a, dqkv, dxn1);
  mixer_norm_backward(l, x, a, dxn1, dx);  // dx is now d(x)
}

}  // namespace titan
