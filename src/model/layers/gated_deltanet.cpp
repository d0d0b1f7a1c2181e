// Qwen3.5's linear-attention mixer (transformers' Qwen3_5GatedDeltaNet), forward and backward,
// composed of the ops of docs/qwen3_5.md:
//   p = xn1 @ [in_proj_qkv; in_proj_z; in_proj_b; in_proj_a]^T   (one GEMM over the fused rows)
//   y = silu(causal_conv1d(p[:, :C]))  -> q [.., Hk, dk], k [.., Hk, dk], v [.., Hv, dv]
//   z = p[:, C:C+VD];  beta = sigmoid(b);  g = -exp(A_log) softplus(a + dt_bias)
//   o = gated_delta(q, k, v, g, beta)   (q, k L2-normalised in the op, q scaled by dk^-1/2; the
//       chunked form; the state restarts at each packed document)
//   h = x + gated_rmsnorm(o, z) @ out_proj^T
// LoRA (model/lora.h): in_proj_{qkv,z,b,a} adapters add into their rows of p, out_proj's into h.
// Tensor parallelism (model/tensor_parallel.h): a rank runs all of this on its whole linear key
// heads and the value heads that read them (no collective inside the recurrence); xn1 is gathered
// over tp under sequence parallelism, out_proj's partial sums reduced, the gated norm weight's
// partial gradient summed.
// With an inference state (generation) the conv window and the recurrent state of each row are
// carried between calls: a prefill runs the chunked form from a zero state, each later call
// continues from the held states (one token: the op's decode step).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/threading.h"
#include "model/decoder_layer.h"
#include "model/inference_state.h"
#include "ops/copy/copy_rows.h"
#include "ops/gated_delta/gates.h"

namespace titan {

using namespace layer_util;

void DecoderModel::gated_deltanet_forward(size_t l, const Tensor& x, LayerActs& a, int64_t B, int64_t S,
                                          Positions pos, InferenceState* cache) {
  const Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const ExecContext& ctx = exec_;
  const Tensor& Win = wbf_ ? wbf_->qkv[l] : L.w_qkv;
  const Tensor& Wo = wbf_ ? wbf_->o[l] : L.w_o;
  // This rank's heads and widths (model/tensor_parallel.h: whole key heads and their value heads).
  const int64_t T = B * S, H = cfg_.hidden_size, Hk = loc_.lin_k_heads, Hv = loc_.lin_v_heads;
  const int64_t dk = cfg_.linear_key_head_dim, dv = cfg_.linear_value_head_dim, KD = Hk * dk, VD = Hv * dv;
  const int64_t C = 2 * KD + VD, R = C + VD + 2 * Hv, Kc = cfg_.linear_conv_kernel_dim;
  const float eps = float(cfg_.rms_norm_eps);
  a.xn1 = Tensor::empty({x.dim(0), H}, gemm_input_dtype(compute_));  // this rank's rows (sequence parallel)
  a.rstd1 = f32({x.dim(0)});
  k.rmsnorm->forward(exec_, x, norm_weight(L.w_in), eps, a.xn1, a.rstd1);
  a.xn1 = tp_gather_rows(a.xn1);  // sequence parallel: the projections read every token
  a.qkv = f32({T, R});
  k.linear->forward(exec_, a.xn1, Win, a.qkv, compute_);
  lora_forward_group(l, LoraGroup::Qkv, a.xn1, &a.qkv, a);  // in_proj_{qkv,z,b,a}: their rows of the fused output
  // Generation: the per-row states (zero at the prefill), made on first use.
  LayerState* st = nullptr;
  if (cache) {
    st = &cache->layers.at(l);
    if (!st->conv.defined()) {
      st->conv = Tensor::zeros({B, C, Kc - 1}, DType::F32);
      st->recurrent = Tensor::zeros({B, Hv, dk, dv}, DType::F32);
    }
  }
  a.conv_x = f32({B, S, C});
  take_columns(exec_, a.qkv, 0, a.conv_x);
  a.conv_y = f32({B, S, C});
  const Tensor wc = L.w_conv.view({C, Kc});
  if (st) {
    // A left-padded prompt: its padding columns are zero inputs (transformers masks them so),
    // and the rows' states start at zero.
    if (cache->len == 0) {
      float* cx = a.conv_x.data<float>();
      for (int64_t b = 0; b < B; ++b)
        std::fill_n(cx + b * S * C, cache->first[size_t(b)] * C, 0.0f);
    }
    Tensor next = f32({B, C, Kc - 1});
    k.conv1d->forward(ctx, a.conv_x, wc, nullptr, st->conv, a.conv_y, next);
    st->conv = next;
  } else {
    Tensor none;
    k.conv1d->forward(ctx, a.conv_x, wc, pos.doc_start, Tensor(), a.conv_y, none);
  }
  a.lq = f32({B, S, Hk, dk});
  a.lk = f32({B, S, Hk, dk});
  a.lv = f32({B, S, Hv, dv});
  const Tensor cy = a.conv_y.view({T, C});
  take_columns(exec_, cy, 0, a.lq);
  take_columns(exec_, cy, KD, a.lk);
  take_columns(exec_, cy, 2 * KD, a.lv);
  a.lz = f32({T * Hv, dv});
  take_columns(exec_, a.qkv, C, a.lz);
  a.lg = f32({B, S, Hv});
  a.lbeta = f32({B, S, Hv});
  delta_gates_forward(ctx, RowView::columns(a.qkv, C + VD, 1, Hv), RowView::columns(a.qkv, C + VD + Hv, 1, Hv),
                      L.w_alog, L.w_dt, a.lg, a.lbeta);
  if (st && cache->len == 0) {
    // padding columns: beta 0 and g 0 leave the state as it is (zero) through them
    float* g = a.lg.data<float>();
    float* be = a.lbeta.data<float>();
    for (int64_t b = 0; b < B; ++b) {
      std::fill_n(g + b * S * Hv, cache->first[size_t(b)] * Hv, 0.0f);
      std::fill_n(be + b * S * Hv, cache->first[size_t(b)] * Hv, 0.0f);
    }
  }
  a.lo = f32({B, S, Hv, dv});
  GatedDeltaOptions o;
  if (st) {
    Tensor fin = f32({B, Hv, dk, dv});
    k.gated_delta->forward(ctx, a.lq, a.lk, a.lv, a.lg, a.lbeta, nullptr, st->recurrent, o, a.lo, fin);
    st->recurrent = fin;
  } else {
    Tensor none;
    k.gated_delta->forward(ctx, a.lq, a.lk, a.lv, a.lg, a.lbeta, pos.doc_start, Tensor(), o, a.lo, none);
  }
  a.ly = f32({T, VD});
  Tensor ly = a.ly.view({T * Hv, dv});
  k.gated_rmsnorm->forward(ctx, a.lo.view({T * Hv, dv}), a.lz, L.w_gnorm, eps, ly);
  if (tp_.on()) {  // row-parallel out_proj: the partial sums reduced over tp, then the residual
    Tensor part = f32({T, H});
    k.linear->forward(exec_, a.ly, Wo, part, compute_);
    a.h = tp_reduce_rows(part);
    k.residual->forward(exec_, a.h, x, a.h);
  } else {
    a.h = f32({T, H});
    k.linear->forward_residual(exec_, a.ly, Wo, &x, a.h, compute_);
  }
  lora_forward_group(l, LoraGroup::O, a.ly, &a.h, a);  // out_proj
}

void DecoderModel::gated_deltanet_backward(size_t l, const Tensor& x, LayerActs& a, Tensor& dx, int64_t B,
                                           int64_t S, Positions pos) {
  Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const ExecContext& ctx = exec_;
  const Tensor& Win = wbf_ ? wbf_->qkv[l] : L.w_qkv;
  const Tensor& Wo = wbf_ ? wbf_->o[l] : L.w_o;
  // This rank's heads and widths (model/tensor_parallel.h: whole key heads and their value heads).
  const int64_t T = B * S, H = cfg_.hidden_size, Hk = loc_.lin_k_heads, Hv = loc_.lin_v_heads;
  const int64_t dk = cfg_.linear_key_head_dim, dv = cfg_.linear_value_head_dim, KD = Hk * dk, VD = Hv * dv;
  const int64_t C = 2 * KD + VD, R = C + VD + 2 * Hv, Kc = cfg_.linear_conv_kernel_dim;
  const float eps = float(cfg_.rms_norm_eps);
  Tensor dly = f32({T, VD});
  const Tensor dh = tp_gather_rows(dx);  // sequence parallel: d(h) of every token
  k.linear->backward(exec_, a.ly, Wo, dh, &dly, grad_or_null(L.g_o), compute_);
  lora_backward_group(l, LoraGroup::O, a.ly, a, dh, dly);
  a.ly = Tensor();
  Tensor dlo = f32({B, S, Hv, dv}), dlz = f32({T * Hv, dv});
  // The gated norm's weight acts on every value head: with tensor parallelism each rank's heads
  // give a partial gradient, summed over tp.
  Tensor gn_scratch;
  Tensor& dgn =
      tp_.on() || !L.g_gnorm.defined() ? (gn_scratch = Tensor::zeros(L.w_gnorm.shape(), DType::F32)) : L.g_gnorm;
  Tensor dlo2 = dlo.view({T * Hv, dv});
  k.gated_rmsnorm->backward(ctx, a.lo.view({T * Hv, dv}), a.lz, L.w_gnorm, eps, dly.view({T * Hv, dv}), dlo2, dlz,
                            dgn);
  if (tp_.on()) tp_grad_sum(gn_scratch, L.g_gnorm);
  dly = Tensor();
  Tensor dq = f32(a.lq.shape()), dkk = f32(a.lk.shape()), dv_ = f32(a.lv.shape()), dg = f32(a.lg.shape()),
         dbeta = f32(a.lbeta.shape()), none;
  GatedDeltaOptions o;
  k.gated_delta->backward(ctx, a.lq, a.lk, a.lv, a.lg, a.lbeta, pos.doc_start, Tensor(), dlo, Tensor(), o, dq, dkk,
                          dv_, dg, dbeta, none);
  dlo = Tensor();
  Tensor dcy = f32({T, C});
  put_columns(exec_, dq, dcy, 0);
  put_columns(exec_, dkk, dcy, KD);
  put_columns(exec_, dv_, dcy, 2 * KD);
  dq = dkk = dv_ = Tensor();
  Tensor dqkv = f32({T, R});
  {
    Tensor dcx = f32({B, S, C});
    Tensor wsc;
    Tensor dwc = L.g_conv.defined() ? L.g_conv.view({C, Kc}) : (wsc = Tensor::zeros({C, Kc}, DType::F32));
    Tensor dsin;
    k.conv1d->backward(ctx, a.conv_x, L.w_conv.view({C, Kc}), pos.doc_start, Tensor(), dcy.view({B, S, C}), dcx,
                       dwc, dsin);
    put_columns(exec_, dcx.view({T, C}), dqkv, 0);
  }
  put_columns(exec_, dlz.view({T, VD}), dqkv, C);
  delta_gates_backward(ctx, RowView::columns(a.qkv, C + VD + Hv, 1, Hv), L.w_alog, L.w_dt, a.lg, a.lbeta, dg, dbeta,
                       RowView::columns(dqkv, C + VD, 1, Hv), RowView::columns(dqkv, C + VD + Hv, 1, Hv), L.g_dt,
                       L.g_alog);
  Tensor dxn1 = f32({T, H});
  k.linear->backward(exec_, a.xn1, Win, dqkv, &dxn1, grad_or_null(L.g_qkv), compute_);
  lora_backward_group(l, LoraGroup::Qkv, a.xn1, a, dqkv, dxn1);
  mixer_norm_backward(l, x, a, dxn1, dx);  // dx is now d(x)
}

}  // namespace titan
