// One decoder layer, forward and backward side by side (shapes in decoder.h; T = B * S tokens,
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
#include "model/positions.h"
#include "model/decoder_layer.h"

namespace titan {
namespace {

Tensor f32(const Shape& s) { return Tensor::empty(s, DType::F32); }
// A weight gradient to accumulate into, or null for a frozen weight (DecoderModel::freeze_base).
Tensor* grad_or_null(Tensor& g) { return g.defined() ? &g : nullptr; }

// dst (contiguous, [T, n] as any shape) = columns [c0, c0 + n) of src [T, W].
void copy_columns(const Tensor& src, int64_t c0, Tensor& dst) {
  const int64_t T = src.dim(0), W = src.dim(1), n = dst.numel() / T;
  const float* s = src.data<float>();
  float* d = dst.data<float>();
  parallel_for(T, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) std::memcpy(d + t * n, s + t * W + c0, size_t(n) * sizeof(float));
  });
}

}  // namespace

// x [T, H] -> *out [T, H] (out null: a recomputation that only refills `a`, so the dense MLP's
// last GEMM is skipped). Fills `a` with what backward needs (all of it; the caller drops parts
// according to the checkpointing mode) and skips the attention block when `a` already holds it.
void DecoderModel::layer_forward(size_t l, const Tensor& x, Tensor* out, LayerActs& a, int64_t B, int64_t S,
                               Positions pos, KvCache* cache) {
  const Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const Tensor& Wqkv = wbf_ ? wbf_->qkv[l] : L.w_qkv;
  const Tensor& Wo = wbf_ ? wbf_->o[l] : L.w_o;
  const int64_t T = B * S, H = cfg_.hidden_size, Q = cfg_.q_dim(), K = cfg_.kv_dim(), D = cfg_.head_dim;
  const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads;
  const float eps = float(cfg_.rms_norm_eps);
  const DType gemm_in = compute_ == DType::BF16 ? DType::BF16 : DType::F32;  // dtype of inputs only a GEMM reads
  if (!a.have_attn) {
    a.xn1 = Tensor::empty({T, H}, gemm_in);
    a.rstd1 = f32({T});
    k.rmsnorm->forward(x, L.w_in, eps, a.xn1, a.rstd1);
    a.qkv = f32({T, Q + 2 * K});
    k.linear->forward(a.xn1, Wqkv, a.qkv, compute_);
    if (L.b_qkv.defined()) k.bias->forward(a.qkv, L.b_qkv);
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
      k.rmsnorm->forward_rows(RowView::columns(a.qkv, 0, nh, D), L.w_qn, eps, q, a.rstd_q);
      k.rmsnorm->forward_rows(RowView::columns(a.qkv, Q, nkv, D), L.w_kn, eps, kk, a.rstd_k);
    } else {
      copy_columns(a.qkv, 0, a.q);
      copy_columns(a.qkv, Q, a.k);
    }
    a.attn = f32({B, S, nh, D});
    if (cache) {
      attend_cached(l, a, B, S, *cache);  // generation: per-row positions, attention over the KV cache
    } else {
      rope_rows(*k.rope, false, q, S, pos, rope_);
      rope_rows(*k.rope, false, kk, S, pos, rope_);
      a.lse = f32({B, nh, S});
      k.attention->forward_rows_seg(q, kk, RowView::columns(a.qkv, Q + K, nkv, D), S, pos.doc_start,
                                    float(1.0 / std::sqrt(double(D))), a.attn, a.lse);
    }
    a.attn = a.attn.view({T, Q});
    a.h = f32({T, H});
    k.linear->forward_residual(a.attn, Wo, &x, a.h, compute_);  // h = x + attn @ Wo^T
    lora_forward_group(l, LoraGroup::O, a.attn, &a.h, a);
    a.have_attn = true;
  }
  // A sparse layer's xn2 also feeds the router (f32), so only a dense one is kept in bf16.
  a.xn2 = Tensor::empty({T, H}, layers_[l].sparse ? DType::F32 : gemm_in);
  a.rstd2 = f32({T});
  k.rmsnorm->forward(a.h, L.w_post, eps, a.xn2, a.rstd2);
  mlp_forward(l, a, a.h, out, T);
  a.have_mlp = true;
}

// The MoE op's inputs for sparse layer l (the same for forward and backward).
MoEArgs DecoderModel::moe_args(size_t l, const LayerActs& a) const {
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
void DecoderModel::mlp_forward(size_t l, LayerActs& a, const Tensor& residual, Tensor* out, int64_t T) {
  const Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  if (L.sparse) {
    MoEArgs m = moe_args(l, a);
    LoraMoeWeights merged;  // with adapters on its MoE parameters: the merged weights, this call only
    lora_merge_moe(l, m, merged);
    Tensor y = out ? *out : f32({T, cfg_.hidden_size});
    k.moe->forward(m, y, a.moe);
    if (out) k.residual->forward(y, residual, y);
    return;
  }
  const int64_t I = cfg_.intermediate_size;
  a.gu = f32({T, 2 * I});
  k.linear->forward(a.xn2, wbf_ ? wbf_->gu[l] : L.w_gu, a.gu, compute_);
  lora_forward_group(l, LoraGroup::GateUp, a.xn2, &a.gu, a);
  a.act = Tensor::empty({T, I}, compute_ == DType::BF16 ? DType::BF16 : DType::F32);
  k.swiglu->forward(a.gu, a.act);
  if (out) k.linear->forward_residual(a.act, wbf_ ? wbf_->down[l] : L.w_down, &residual, *out, compute_);
  lora_forward_group(l, LoraGroup::Down, a.act, out, a);
}

// dy [T, H] = d(mlp output) -> dxn2 [T, H] = d(xn2) (overwritten); parameter grads accumulate.
void DecoderModel::mlp_backward(size_t l, LayerActs& a, const Tensor& dy, Tensor& dxn2, int64_t T,
                              const Tensor* dlogits_extra) {
  Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  if (L.sparse) {
    MoEArgs m = moe_args(l, a);
    MoEGrads g;
    g.dx = &dxn2, g.drouter = grad_or_null(L.g_router), g.dgate_up = grad_or_null(L.g_egu),
    g.ddown = grad_or_null(L.g_edown), g.dlogits_extra = dlogits_extra;
    LoraMoeWeights merged, dmerged;  // merged again (not kept from the forward: their memory)
    if (lora_merge_moe(l, m, merged)) lora_moe_grads(merged, g, dmerged);
    k.moe->backward(m, a.moe, dy, g);
    a.moe = MoESaved();
    merged = LoraMoeWeights();
    if (dmerged.w[0].defined() || dmerged.w[1].defined() || dmerged.w[2].defined()) lora_moe_backward(l, dmerged);
    return;
  }
  const int64_t I = cfg_.intermediate_size;
  Tensor dact = f32({T, I});
  k.linear->backward(a.act, wbf_ ? wbf_->down[l] : L.w_down, dy, &dact, grad_or_null(L.g_down), compute_);
  lora_backward_group(l, LoraGroup::Down, a.act, a, dy, dact);
  a.act = Tensor();
  // d(gate/up): in bf16 straight from SwiGLU's backward for the bf16 GEMMs; in f32 in place of gu.
  Tensor dgu = compute_ == DType::BF16 ? Tensor::empty({T, 2 * I}, DType::BF16) : a.gu;
  k.swiglu->backward(a.gu, dact, dgu);
  a.gu = Tensor();
  dact = Tensor();
  k.linear->backward(a.xn2, wbf_ ? wbf_->gu[l] : L.w_gu, dgu, &dxn2, grad_or_null(L.g_gu), compute_);
  lora_backward_group(l, LoraGroup::GateUp, a.xn2, a, dgu, dxn2);
}

// dx: on entry d(layer output) [T, H]; on exit d(layer input). Parameter grads accumulate. `a`
// must be complete (recomputed by the caller under checkpointing); it is cleared on exit.
void DecoderModel::layer_backward(size_t l, const Tensor& x, LayerActs& a, Tensor& dx, int64_t B, int64_t S,
                                Positions pos, const Tensor* dlogits_extra) {
  Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const Tensor& Wqkv = wbf_ ? wbf_->qkv[l] : L.w_qkv;
  const Tensor& Wo = wbf_ ? wbf_->o[l] : L.w_o;
  const int64_t T = B * S, H = cfg_.hidden_size, Q = cfg_.q_dim(), K = cfg_.kv_dim(), D = cfg_.head_dim;
  const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads;
  TITAN_ASSERT(a.have_attn && a.have_mlp, "layer ", l, ": backward without its forward's activations");
  // MLP block: out = h + mlp(rmsnorm(h)); d(h) = d(out) + rmsnorm'(d(xn2)), added into dx.
  {
    Tensor dxn2 = f32({T, H});
    mlp_backward(l, a, dx, dxn2, T, dlogits_extra);
    k.rmsnorm->backward_add(a.h, L.w_post, a.rstd2, dxn2, dx, L.g_post);  // dx is now d(h)
  }
  // Attention block: h = x + o(attention(rope(norm(q)), rope(norm(k)), v))
  {
    Tensor dattn = f32({T, Q});
    k.linear->backward(a.attn, Wo, dx, &dattn, grad_or_null(L.g_o), compute_);
    lora_backward_group(l, LoraGroup::O, a.attn, a, dx, dattn);
    // dq, dk, dv land in their columns of the fused gradient; RoPE and the q/k norm go back in place.
    Tensor dqkv = f32({T, Q + 2 * K});
    const RowView dq = RowView::columns(dqkv, 0, nh, D), dk = RowView::columns(dqkv, Q, nkv, D);
    k.attention->backward_rows_seg(RowView::of(a.q, nh, D), RowView::of(a.k, nkv, D),
                                   RowView::columns(a.qkv, Q + K, nkv, D), a.attn.view({B, S, nh, D}), a.lse,
                                   dattn.view({B, S, nh, D}), S, pos.doc_start, float(1.0 / std::sqrt(double(D))),
                                   dq, dk, RowView::columns(dqkv, Q + K, nkv, D));
    dattn = Tensor();
    rope_rows(*k.rope, true, dq, S, pos, rope_);
    rope_rows(*k.rope, true, dk, S, pos, rope_);
    if (cfg_.has_qk_norm()) {
      k.rmsnorm->backward_rows(RowView::columns(a.qkv, 0, nh, D), L.w_qn, a.rstd_q, dq, dq, L.g_qn, false);
      k.rmsnorm->backward_rows(RowView::columns(a.qkv, Q, nkv, D), L.w_kn, a.rstd_k, dk, dk, L.g_kn, false);
    }
    if (L.gb_qkv.defined()) k.bias->backward(dqkv, L.gb_qkv);
    Tensor dxn1 = f32({T, H});
    k.linear->backward(a.xn1, Wqkv, dqkv, &dxn1, grad_or_null(L.g_qkv), compute_);
    lora_backward_group(l, LoraGroup::Qkv, a.xn1, a, dqkv, dxn1);
    k.rmsnorm->backward_add(x, L.w_in, a.rstd1, dxn1, dx, L.g_in);  // dx is now d(x)
  }
  a = LayerActs();
}

}  // namespace titan
