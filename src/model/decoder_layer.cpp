// One decoder layer: the mixer block (its input norm, the mixer, its output projection and the
// residual) then the MLP block (post-attention norm, the MLP, the residual), each dispatched on
// the layer's kind (model/layer_kind.h). Each kind's forward and backward are in model/layers/:
// attention.cpp (+ attention_cached.cpp for generation), dense_mlp.cpp, moe_mlp.cpp.
#include "model/decoder_layer.h"

namespace titan {

using namespace layer_util;

// x [T, H] -> *out [T, H] (out null: a recomputation that only refills `a`, so the dense MLP's
// last GEMM is skipped). Fills `a` with what backward needs (all of it; the caller drops parts
// according to the checkpointing mode) and skips the mixer block when `a` already holds it.
void DecoderModel::layer_forward(size_t l, const Tensor& x, Tensor* out, LayerActs& a, int64_t B, int64_t S,
                                 Positions pos, InferenceState* cache) {
  const Layer& L = layers_[l];
  const int64_t T = B * S, Tr = x.dim(0), H = cfg_.hidden_size;  // Tr: this rank's rows (model/tensor_parallel.h)
  if (!a.have_attn) {
    switch (L.kind.mixer) {
      case MixerKind::Attention: attention_forward(l, x, a, B, S, pos, cache); break;
      case MixerKind::GatedAttention: gated_attention_forward(l, x, a, B, S, pos, cache); break;
      case MixerKind::GatedDeltaNet: gated_deltanet_forward(l, x, a, B, S, pos, cache); break;
      default: fail(describe_layer(int64_t(l), L.kind), ": no forward for this mixer kind");
    }
    a.have_attn = true;
  }
  // A MoE layer's xn2 also feeds the router (f32), so only a dense one is kept in bf16.
  a.xn2 = Tensor::empty({Tr, H}, L.moe() ? DType::F32 : gemm_input_dtype(compute_), dev());
  a.rstd2 = f32({Tr});
  kernels_[l].rmsnorm->forward(exec_, a.h, norm_weight(L.w_post), float(cfg_.rms_norm_eps), a.xn2, a.rstd2);
  a.xn2 = tp_gather_rows(a.xn2);  // sequence parallel: the MLP reads every token
  if (L.moe())
    moe_mlp_forward(l, a, a.h, out, T);
  else
    dense_mlp_forward(l, a, a.h, out, T);
  a.have_mlp = true;
}

// dx: on entry d(layer output) [T, H]; on exit d(layer input). Parameter grads accumulate. `a`
// must be complete (recomputed by the caller under checkpointing); it is cleared on exit.
void DecoderModel::layer_backward(size_t l, const Tensor& x, LayerActs& a, Tensor& dx, int64_t B, int64_t S,
                                  Positions pos, const Tensor* dlogits_extra) {
  Layer& L = layers_[l];
  const int64_t T = B * S, H = cfg_.hidden_size;
  TITAN_ASSERT(a.have_attn && a.have_mlp, "layer ", l, ": backward without its forward's activations");
  // MLP block: out = h + mlp(rmsnorm(h)); d(h) = d(out) + rmsnorm'(d(xn2)), added into dx. With
  // tensor parallelism d(xn2) is a partial sum until reduced over tp (model/tensor_parallel.h).
  {
    Tensor dxn2 = f32({T, H});
    const Tensor dy = tp_gather_rows(dx);
    if (L.moe())
      moe_mlp_backward(l, a, dy, dxn2, T, dlogits_extra);
    else
      dense_mlp_backward(l, a, dy, dxn2, T);
    Tensor d = tp_reduce_rows(dxn2);
    if (tp_norm_grads_partial()) {
      Tensor part = Tensor::zeros({H}, DType::F32, dev());
      kernels_[l].rmsnorm->backward_add(exec_, a.h, norm_weight(L.w_post), a.rstd2, d, dx, part);
      tp_grad_sum(part, L.g_post);
    } else {
      kernels_[l].rmsnorm->backward_add(exec_, a.h, norm_weight(L.w_post), a.rstd2, d, dx, L.g_post);  // dx is now d(h)
    }
  }
  switch (L.kind.mixer) {
    case MixerKind::Attention: attention_backward(l, x, a, dx, B, S, pos); break;
    case MixerKind::GatedAttention: gated_attention_backward(l, x, a, dx, B, S, pos); break;
    case MixerKind::GatedDeltaNet: gated_deltanet_backward(l, x, a, dx, B, S, pos); break;
    default: fail(describe_layer(int64_t(l), L.kind), ": no backward for this mixer kind");
  }
  a = LayerActs();
}

}  // namespace titan
