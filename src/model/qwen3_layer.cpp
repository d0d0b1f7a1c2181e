// One decoder layer, forward and backward side by side (shapes in qwen3.h; T = B * S tokens,
// W = Q + 2K the fused q/k/v width).
#include <cmath>
#include <cstring>

#include "core/threading.h"
#include "model/qwen3_layer.h"

namespace titan {
namespace {

// qkv [T, Q+2K] -> q [T, Q], k [T, K], v [T, K] (contiguous copies).
void split_qkv(const Tensor& qkv, Tensor& q, Tensor& k, Tensor& v, int64_t Q, int64_t K) {
  const int64_t T = qkv.dim(0), W = Q + 2 * K;
  const float* s = qkv.data<float>();
  float *qd = q.data<float>(), *kd = k.data<float>(), *vd = v.data<float>();
  parallel_for(T, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      std::memcpy(qd + t * Q, s + t * W, size_t(Q) * 4);
      std::memcpy(kd + t * K, s + t * W + Q, size_t(K) * 4);
      std::memcpy(vd + t * K, s + t * W + Q + K, size_t(K) * 4);
    }
  });
}

// The inverse: dq [T, Q], dk [T, K], dv [T, K] -> dqkv [T, Q+2K].
void pack_qkv(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& qkv, int64_t Q, int64_t K) {
  const int64_t T = qkv.dim(0), W = Q + 2 * K;
  float* d = qkv.data<float>();
  const float *qs = q.data<float>(), *ks = k.data<float>(), *vs = v.data<float>();
  parallel_for(T, 64, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      std::memcpy(d + t * W, qs + t * Q, size_t(Q) * 4);
      std::memcpy(d + t * W + Q, ks + t * K, size_t(K) * 4);
      std::memcpy(d + t * W + Q + K, vs + t * K, size_t(K) * 4);
    }
  });
}

Tensor f32(const Shape& s) { return Tensor::empty(s, DType::F32); }

}  // namespace

// x [T, H] -> *out [T, H] (out null: a recomputation that only refills `a`, so the dense MLP's
// last GEMM is skipped). Fills `a` with what backward needs (all of it; the caller drops parts
// according to the checkpointing mode) and skips the attention block when `a` already holds it.
void Qwen3Model::layer_forward(size_t l, const Tensor& x, Tensor* out, LayerActs& a, int64_t B, int64_t S,
                               Positions pos) {
  const Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const Tensor& Wqkv = wbf_ ? wbf_->qkv[l] : L.w_qkv;
  const Tensor& Wo = wbf_ ? wbf_->o[l] : L.w_o;
  const int64_t T = B * S, H = cfg_.hidden_size, Q = cfg_.q_dim(), K = cfg_.kv_dim(), D = cfg_.head_dim;
  const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads;
  const float eps = float(cfg_.rms_norm_eps);
  if (!a.have_attn) {
    a.xn1 = f32({T, H});
    a.rstd1 = f32({T});
    k.rmsnorm->forward(x, L.w_in, eps, a.xn1, a.rstd1);
    a.qkv = f32({T, Q + 2 * K});
    k.linear->forward(a.xn1, Wqkv, a.qkv, compute_);
    Tensor qr = f32({T * nh, D}), kr = f32({T * nkv, D});
    a.v = f32({B, S, nkv, D});
    split_qkv(a.qkv, qr, kr, a.v, Q, K);
    a.q = f32({T * nh, D});
    a.k = f32({T * nkv, D});
    a.rstd_q = f32({T * nh});
    a.rstd_k = f32({T * nkv});
    k.rmsnorm->forward(qr, L.w_qn, eps, a.q, a.rstd_q);
    k.rmsnorm->forward(kr, L.w_kn, eps, a.k, a.rstd_k);
    a.q = a.q.view({B, S, nh, D});
    a.k = a.k.view({B, S, nkv, D});
    k.rope->forward_rows(RowView::of(a.q, nh, D), S, pos.start, rope_);
    k.rope->forward_rows(RowView::of(a.k, nkv, D), S, pos.start, rope_);
    a.attn = f32({B, S, nh, D});
    a.lse = f32({B, nh, S});
    k.attention->forward(a.q, a.k, a.v, float(1.0 / std::sqrt(double(D))), a.attn, a.lse);
    a.attn = a.attn.view({T, Q});
    a.h = f32({T, H});
    k.linear->forward(a.attn, Wo, a.h, compute_);
    k.residual->forward(a.h, x, a.h);
    a.have_attn = true;
  }
  a.xn2 = f32({T, H});
  a.rstd2 = f32({T});
  k.rmsnorm->forward(a.h, L.w_post, eps, a.xn2, a.rstd2);
  mlp_forward(l, a, a.h, out, T);
  a.have_mlp = true;
}

// The MoE op's inputs for sparse layer l (the same for forward and backward).
MoEArgs Qwen3Model::moe_args(size_t l, const LayerActs& a) const {
  const Layer& L = layers_[l];
  MoEArgs m;
  m.x = &a.xn2, m.router = &L.w_router;
  m.gate_up = wbf_ ? &wbf_->gu[l] : &L.w_egu, m.down = wbf_ ? &wbf_->down[l] : &L.w_edown;
  m.bias = bias_.empty() ? nullptr : &bias_[l];
  m.top_k = cfg_.num_experts_per_tok, m.norm_topk_prob = cfg_.norm_topk_prob, m.compute = compute_;
  return m;
}

// *out [T, H] = residual + mlp(xn2): the dense SwiGLU MLP or the sparse MoE block (out null: only
// what the backward needs).
void Qwen3Model::mlp_forward(size_t l, LayerActs& a, const Tensor& residual, Tensor* out, int64_t T) {
  const Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  if (L.sparse) {
    const MoEArgs m = moe_args(l, a);
    Tensor y = out ? *out : f32({T, cfg_.hidden_size});
    k.moe->forward(m, y, a.moe);
    if (out) k.residual->forward(y, residual, y);
    return;
  }
  const int64_t I = cfg_.intermediate_size;
  a.gu = f32({T, 2 * I});
  k.linear->forward(a.xn2, wbf_ ? wbf_->gu[l] : L.w_gu, a.gu, compute_);
  a.act = f32({T, I});
  k.swiglu->forward(a.gu, a.act);
  if (!out) return;
  k.linear->forward(a.act, wbf_ ? wbf_->down[l] : L.w_down, *out, compute_);
  k.residual->forward(*out, residual, *out);
}

// dy [T, H] = d(mlp output) -> dxn2 [T, H] = d(xn2) (overwritten); parameter grads accumulate.
void Qwen3Model::mlp_backward(size_t l, LayerActs& a, const Tensor& dy, Tensor& dxn2, int64_t T,
                              const Tensor* dlogits_extra) {
  Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  if (L.sparse) {
    const MoEArgs m = moe_args(l, a);
    MoEGrads g;
    g.dx = &dxn2, g.drouter = &L.g_router, g.dgate_up = &L.g_egu, g.ddown = &L.g_edown, g.dlogits_extra = dlogits_extra;
    k.moe->backward(m, a.moe, dy, g);
    a.moe = MoESaved();
    return;
  }
  const int64_t I = cfg_.intermediate_size;
  Tensor dact = f32({T, I});
  k.linear->backward(a.act, wbf_ ? wbf_->down[l] : L.w_down, dy, &dact, &L.g_down, compute_);
  a.act = Tensor();
  Tensor dgu = f32({T, 2 * I});
  k.swiglu->backward(a.gu, dact, dgu);
  a.gu = Tensor();
  dact = Tensor();
  k.linear->backward(a.xn2, wbf_ ? wbf_->gu[l] : L.w_gu, dgu, &dxn2, &L.g_gu, compute_);
}

// dx: on entry d(layer output) [T, H]; on exit d(layer input). Parameter grads accumulate. `a`
// must be complete (recomputed by the caller under checkpointing); it is cleared on exit.
void Qwen3Model::layer_backward(size_t l, const Tensor& x, LayerActs& a, Tensor& dx, int64_t B, int64_t S,
                                Positions pos, const Tensor* dlogits_extra) {
  Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const Tensor& Wqkv = wbf_ ? wbf_->qkv[l] : L.w_qkv;
  const Tensor& Wo = wbf_ ? wbf_->o[l] : L.w_o;
  const int64_t T = B * S, H = cfg_.hidden_size, Q = cfg_.q_dim(), K = cfg_.kv_dim(), D = cfg_.head_dim;
  const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads;
  TITAN_ASSERT(a.have_attn && a.have_mlp, "layer ", l, ": backward without its forward's activations");
  // MLP block: out = h + mlp(rmsnorm(h))
  {
    Tensor dxn2 = f32({T, H});
    mlp_backward(l, a, dx, dxn2, T, dlogits_extra);
    Tensor dh = f32({T, H});
    k.rmsnorm->backward(a.h, L.w_post, a.rstd2, dxn2, dh, L.g_post);
    k.residual->accumulate(dx, dh);  // dx is now d(h)
  }
  // Attention block: h = x + o(attention(rope(norm(q)), rope(norm(k)), v))
  {
    Tensor dattn = f32({T, Q});
    k.linear->backward(a.attn, Wo, dx, &dattn, &L.g_o, compute_);
    Tensor dq = f32({B, S, nh, D}), dk = f32({B, S, nkv, D}), dv = f32({B, S, nkv, D});
    k.attention->backward(a.q, a.k, a.v, a.attn.view({B, S, nh, D}), a.lse, dattn.view({B, S, nh, D}),
                          float(1.0 / std::sqrt(double(D))), dq, dk, dv);
    dattn = Tensor();
    k.rope->backward_rows(RowView::of(dq, nh, D), S, pos.start, rope_);
    k.rope->backward_rows(RowView::of(dk, nkv, D), S, pos.start, rope_);
    Tensor qr = f32({T * nh, D}), kr = f32({T * nkv, D}), vtmp = f32({T, K});
    split_qkv(a.qkv, qr, kr, vtmp, Q, K);
    Tensor dqr = f32({T * nh, D}), dkr = f32({T * nkv, D});
    k.rmsnorm->backward(qr, L.w_qn, a.rstd_q, dq.view({T * nh, D}), dqr, L.g_qn);
    k.rmsnorm->backward(kr, L.w_kn, a.rstd_k, dk.view({T * nkv, D}), dkr, L.g_kn);
    Tensor dqkv = f32({T, Q + 2 * K});
    pack_qkv(dqr, dkr, dv, dqkv, Q, K);
    Tensor dxn1 = f32({T, H});
    k.linear->backward(a.xn1, Wqkv, dqkv, &dxn1, &L.g_qkv, compute_);
    Tensor dxin = f32({T, H});
    k.rmsnorm->backward(x, L.w_in, a.rstd1, dxn1, dxin, L.g_in);
    k.residual->accumulate(dx, dxin);
  }
  a = LayerActs();
}

}  // namespace titan
