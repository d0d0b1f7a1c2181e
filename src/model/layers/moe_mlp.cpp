// The MoE MLP block (Qwen3-MoE): *out = residual + moe(xn2) through the MoE op (ops/moe/moe.h:
// router, top-k, grouped experts), forward and backward, with LoRA on the router and the experts
// merged per call (model/decoder_lora.cpp).
#include "model/decoder_layer.h"
#include "ops/moe/expert_parallel.h"

namespace titan {

using namespace layer_util;

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

// *out [T, H] = residual + moe(a.xn2) (out null: only what the backward needs).
void DecoderModel::moe_mlp_forward(size_t l, LayerActs& a, const Tensor& residual, Tensor* out, int64_t T) {
  const KernelSet& k = kernels_[l];
  MoEArgs m = moe_args(l, a);
  LoraMoeWeights merged;  // with adapters on its MoE parameters: the merged weights, this call only
  lora_merge_moe(l, m, merged);
  if (ep_.on()) {  // the slots go to the experts' owners and back (ops/moe/expert_parallel.h)
    Tensor y = out ? *out : f32({T, cfg_.hidden_size});
    ep_bytes_ += moe_ep_forward(exec_, m, *ep_.comm, y, a.moe);
    if (layers_[l].w_sgu.defined()) shared_expert_forward(l, a, y, T);
    if (out) k.residual->forward(exec_, y, residual, y);
    return;
  }
  if (tp_.on()) {  // each rank's slice of every expert: partial sums, reduced over tp, then the residual
    Tensor part = f32({T, cfg_.hidden_size});
    k.moe->forward(exec_, m, part, a.moe);
    if (layers_[l].w_sgu.defined()) shared_expert_forward(l, a, part, T);  // qwen3_5_moe: its partial sum too
    if (!out) return;
    Tensor y = tp_reduce_rows(part);
    k.residual->forward(exec_, y, residual, *out);
    return;
  }
  Tensor y = out ? *out : f32({T, cfg_.hidden_size});
  k.moe->forward(exec_, m, y, a.moe);
  if (layers_[l].w_sgu.defined()) shared_expert_forward(l, a, y, T);  // qwen3_5_moe (qwen3_5_layer.cpp)
  if (out) k.residual->forward(exec_, y, residual, y);
}

// dy [T, H] = d(moe output) -> dxn2 [T, H]; dlogits_extra: the auxiliary loss's gradient on the
// router logits (or null). Parameter grads accumulate.
void DecoderModel::moe_mlp_backward(size_t l, LayerActs& a, const Tensor& dy, Tensor& dxn2, int64_t T,
                                    const Tensor* dlogits_extra) {
  Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  MoEArgs m = moe_args(l, a);
  MoEGrads g;
  g.dx = &dxn2, g.drouter = grad_or_null(L.g_router), g.dgate_up = grad_or_null(L.g_egu),
  g.ddown = grad_or_null(L.g_edown), g.dlogits_extra = dlogits_extra;
  LoraMoeWeights merged, dmerged;  // merged again (not kept from the forward: their memory)
  if (lora_merge_moe(l, m, merged)) lora_moe_grads(merged, g, dmerged);
  // Tensor parallelism: the router's logit gradient from the experts is a partial sum (each rank's
  // expert slices), the auxiliary loss's is whole on every rank: each rank adds 1/tp of it, and the
  // router's partial gradient is summed over tp (dxn2 is reduced by the caller).
  Tensor extra_part, drouter_part;
  if (tp_.on()) {
    if (dlogits_extra) {
      extra_part = f32(dlogits_extra->shape());
      const float s = 1.0f / float(tp_.size());
      const float* e = dlogits_extra->data<float>();
      float* d = extra_part.data<float>();
      for (int64_t i = 0; i < extra_part.numel(); ++i) d[i] = e[i] * s;
      g.dlogits_extra = &extra_part;
    }
    if (g.drouter) {
      drouter_part = Tensor::zeros(L.w_router.shape(), DType::F32);
      g.drouter = &drouter_part;
    }
  }
  if (ep_.on())
    ep_bytes_ += moe_ep_backward(exec_, m, *ep_.comm, a.moe, dy, g);
  else
    k.moe->backward(exec_, m, a.moe, dy, g);
  if (L.w_sgu.defined()) shared_expert_backward(l, a, dy, dxn2, T);  // qwen3_5_moe: dxn2 +=
  if (drouter_part.defined()) tp_grad_sum(drouter_part, L.g_router);
  a.moe = MoESaved();
  merged = LoraMoeWeights();
  if (dmerged.w[0].defined() || dmerged.w[1].defined() || dmerged.w[2].defined()) lora_moe_backward(l, dmerged);
}

}  // namespace titan
