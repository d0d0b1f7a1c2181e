// The dense SwiGLU MLP block: *out = residual + down(swiglu(gate_up(xn2))), forward and backward,
// with LoRA on its projections (model/decoder_lora.cpp).
#include "model/decoder_layer.h"

namespace titan {

using namespace layer_util;

// *out [T, H] = residual + mlp(a.xn2) (out null: only what the backward needs).
void DecoderModel::dense_mlp_forward(size_t l, LayerActs& a, const Tensor& residual, Tensor* out, int64_t T) {
  const Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const int64_t I = loc_.inter;  // this rank's share (model/tensor_parallel.h)
  a.gu = f32({T, 2 * I});
  k.linear->forward(exec_, a.xn2, wbf_ ? wbf_->gu[l] : L.w_gu, a.gu, compute_);
  lora_forward_group(l, LoraGroup::GateUp, a.xn2, &a.gu, a);
  a.act = Tensor::empty({T, I}, compute_ == DType::BF16 ? DType::BF16 : DType::F32, dev());
  k.swiglu->forward(exec_, a.gu, a.act);
  if (out && tp_.on()) {  // row-parallel down_proj: partial sums reduced over tp, then the residual
    Tensor part = f32({T, cfg_.hidden_size});
    k.linear->forward(exec_, a.act, wbf_ ? wbf_->down[l] : L.w_down, part, compute_);
    Tensor y = tp_reduce_rows(part);
    k.residual->forward(exec_, y, residual, *out);
  } else if (out) {
    k.linear->forward_residual(exec_, a.act, wbf_ ? wbf_->down[l] : L.w_down, &residual, *out, compute_);
  }
  lora_forward_group(l, LoraGroup::Down, a.act, out, a);
}

// dy [T, H] = d(mlp output) -> dxn2 [T, H] = d(xn2) (overwritten); parameter grads accumulate.
void DecoderModel::dense_mlp_backward(size_t l, LayerActs& a, const Tensor& dy, Tensor& dxn2, int64_t T) {
  Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const int64_t I = loc_.inter;  // this rank's share (model/tensor_parallel.h)
  Tensor dact = f32({T, I});
  k.linear->backward(exec_, a.act, wbf_ ? wbf_->down[l] : L.w_down, dy, &dact, grad_or_null(L.g_down), compute_);
  lora_backward_group(l, LoraGroup::Down, a.act, a, dy, dact);
  a.act = Tensor();
  // d(gate/up): in bf16 straight from SwiGLU's backward for the bf16 GEMMs; in f32 in place of gu.
  Tensor dgu = compute_ == DType::BF16 ? Tensor::empty({T, 2 * I}, DType::BF16, dev()) : a.gu;
  k.swiglu->backward(exec_, a.gu, dact, dgu);
  a.gu = Tensor();
  dact = Tensor();
  k.linear->backward(exec_, a.xn2, wbf_ ? wbf_->gu[l] : L.w_gu, dgu, &dxn2, grad_or_null(L.g_gu), compute_);
  lora_backward_group(l, LoraGroup::GateUp, a.xn2, a, dgu, dxn2);
}

}  // namespace titan
