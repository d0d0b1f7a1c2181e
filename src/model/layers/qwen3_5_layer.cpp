// Qwen3.5 decoder layers (dense and MoE): their parameters (the storage behind the ParamSpecs of
// model/param_spec.cpp, in that order), the family's zero-centred RMSNorm weight, and the MoE
// block's shared expert with its sigmoid gate. The two mixers are gated_attention.cpp and
// gated_deltanet.cpp.
#include <cmath>
#include <cstring>

#include "core/threading.h"
#include "model/decoder_layer.h"
#include "ops/moe/shared_gate.h"

namespace titan {

using namespace layer_util;

std::pair<Tensor, Tensor> DecoderModel::new_param(const Shape& s, DType dt) const {
  if (deferred_) return {Tensor::deferred(s, dt), base_frozen_ ? Tensor() : Tensor::deferred(s, DType::F32)};
  return {Tensor::zeros(s, dt), base_frozen_ ? Tensor() : Tensor::zeros(s, DType::F32)};
}

// x^ (1 + w): the rmsnorm op with weight 1 + w computes it, and its weight gradient (sum dy x^)
// is the gradient of w, so the op's dw goes straight into w's gradient.
Tensor DecoderModel::norm_weight(const Tensor& w) const {
  if (!cfg_.zero_centered_norm()) return w;
  Tensor one = Tensor::empty(w.shape(), DType::F32);
  const float* s = w.data<float>();
  float* d = one.data<float>();
  for (int64_t i = 0; i < w.numel(); ++i) d[i] = 1.0f + s[i];
  return one;
}

void DecoderModel::build_qwen3_5_layer(size_t l) {
  Layer& L = layers_[l];
  // This rank's widths (model/tensor_parallel.h; the whole model's without tensor parallelism).
  const int64_t H = cfg_.hidden_size, I = loc_.inter, D = cfg_.head_dim;
  const int64_t Q = loc_.q, K = loc_.kv;
  const DType wdt = weight_dtype_;
  auto rows = [](const Tensor& t, int64_t b, int64_t e) { return t.defined() ? t.slice0(b, e) : Tensor(); };
  const std::string p = "model.layers." + std::to_string(l) + ".";
  std::tie(L.w_in, L.g_in) = new_param({H}, DType::F32);
  std::tie(L.w_post, L.g_post) = new_param({H}, DType::F32);
  params_.add(p + "input_layernorm.weight", L.w_in, L.g_in);
  if (L.kind.mixer == MixerKind::GatedDeltaNet) {
    const std::string a = p + "linear_attn.";
    const int64_t Hv = loc_.lin_v_heads, VD = Hv * cfg_.linear_value_head_dim;
    const int64_t C = 2 * loc_.lin_k_heads * cfg_.linear_key_head_dim + VD, R = C + VD + 2 * Hv;
    const int64_t Kc = cfg_.linear_conv_kernel_dim;
    std::tie(L.w_qkv, L.g_qkv) = new_param({R, H}, wdt);
    std::tie(L.w_conv, L.g_conv) = new_param({C, 1, Kc}, DType::F32);
    std::tie(L.w_dt, L.g_dt) = new_param({Hv}, DType::F32);
    std::tie(L.w_alog, L.g_alog) = new_param({Hv}, DType::F32);
    std::tie(L.w_gnorm, L.g_gnorm) = new_param({cfg_.linear_value_head_dim}, DType::F32);
    std::tie(L.w_o, L.g_o) = new_param({H, VD}, wdt);
    const int64_t cuts[5] = {0, C, C + VD, C + VD + Hv, R};
    const char* proj[4] = {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"};
    for (int j = 0; j < 4; ++j)
      params_.add(a + proj[j] + ".weight", L.w_qkv.slice0(cuts[j], cuts[j + 1]), rows(L.g_qkv, cuts[j], cuts[j + 1]));
    params_.add(a + "conv1d.weight", L.w_conv, L.g_conv);
    params_.add(a + "dt_bias", L.w_dt, L.g_dt);
    params_.add(a + "A_log", L.w_alog, L.g_alog);
    params_.add(a + "norm.weight", L.w_gnorm, L.g_gnorm);
    params_.add(a + "out_proj.weight", L.w_o, L.g_o);
  } else {
    const std::string a = p + "self_attn.";
    std::tie(L.w_qkv, L.g_qkv) = new_param({2 * Q + 2 * K, H}, wdt);
    std::tie(L.w_o, L.g_o) = new_param({H, Q}, wdt);
    std::tie(L.w_qn, L.g_qn) = new_param({D}, DType::F32);
    std::tie(L.w_kn, L.g_kn) = new_param({D}, DType::F32);
    const int64_t cuts[4] = {0, 2 * Q, 2 * Q + K, 2 * Q + 2 * K};
    const char* proj[3] = {"q_proj", "k_proj", "v_proj"};
    for (int j = 0; j < 3; ++j)
      params_.add(a + proj[j] + ".weight", L.w_qkv.slice0(cuts[j], cuts[j + 1]), rows(L.g_qkv, cuts[j], cuts[j + 1]));
    params_.add(a + "o_proj.weight", L.w_o, L.g_o);
    params_.add(a + "q_norm.weight", L.w_qn, L.g_qn);
    params_.add(a + "k_norm.weight", L.w_kn, L.g_kn);
  }
  params_.add(p + "post_attention_layernorm.weight", L.w_post, L.g_post);
  if (L.moe()) {
    // this rank's experts (model/expert_parallel.h), its share of each (model/tensor_parallel.h)
    const int64_t E = cfg_.num_experts, MI = loc_.moe_inter, SI = cfg_.shared_expert_intermediate_size / tp_.size();
    const int64_t El = loc_.experts;
    std::tie(L.w_router, L.g_router) = new_param({E, H}, DType::F32);
    std::tie(L.w_egu, L.g_egu) = new_param({El, 2 * MI, H}, wdt);
    std::tie(L.w_edown, L.g_edown) = new_param({El, H, MI}, wdt);
    params_.add(p + "mlp.gate.weight", L.w_router, L.g_router);
    for (int64_t e = 0; e < El; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(loc_.expert0 + e) + ".";
      Tensor wgu = L.w_egu.slice0(e, e + 1).view({2 * MI, H});
      Tensor ggu = L.g_egu.defined() ? L.g_egu.slice0(e, e + 1).view({2 * MI, H}) : Tensor();
      params_.add(x + "gate_proj.weight", wgu.slice0(0, MI), rows(ggu, 0, MI));
      params_.add(x + "up_proj.weight", wgu.slice0(MI, 2 * MI), rows(ggu, MI, 2 * MI));
      params_.add(x + "down_proj.weight", L.w_edown.slice0(e, e + 1).view({H, MI}),
                  L.g_edown.defined() ? L.g_edown.slice0(e, e + 1).view({H, MI}) : Tensor());
    }
    if (cfg_.has_shared_expert()) {
      std::tie(L.w_sgu, L.g_sgu) = new_param({2 * SI, H}, wdt);
      std::tie(L.w_sdown, L.g_sdown) = new_param({H, SI}, wdt);
      std::tie(L.w_sgate, L.g_sgate) = new_param({1, H}, DType::F32);
      params_.add(p + "mlp.shared_expert.gate_proj.weight", L.w_sgu.slice0(0, SI), rows(L.g_sgu, 0, SI));
      params_.add(p + "mlp.shared_expert.up_proj.weight", L.w_sgu.slice0(SI, 2 * SI), rows(L.g_sgu, SI, 2 * SI));
      params_.add(p + "mlp.shared_expert.down_proj.weight", L.w_sdown, L.g_sdown);
      params_.add(p + "mlp.shared_expert_gate.weight", L.w_sgate, L.g_sgate);
    }
    return;
  }
  std::tie(L.w_gu, L.g_gu) = new_param({2 * I, H}, wdt);
  std::tie(L.w_down, L.g_down) = new_param({H, I}, wdt);
  params_.add(p + "mlp.gate_proj.weight", L.w_gu.slice0(0, I), rows(L.g_gu, 0, I));
  params_.add(p + "mlp.up_proj.weight", L.w_gu.slice0(I, 2 * I), rows(L.g_gu, I, 2 * I));
  params_.add(p + "mlp.down_proj.weight", L.w_down, L.g_down);
}

void DecoderModel::mixer_norm_backward(size_t l, const Tensor& x, const LayerActs& a, Tensor& dxn1, Tensor& dx) {
  Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  Tensor d = tp_reduce_rows(dxn1);  // column-parallel: the input gradient summed over tp
  if (tp_norm_grads_partial()) {    // sequence parallel: this rank's rows give a partial weight gradient
    Tensor part = Tensor::zeros({cfg_.hidden_size}, DType::F32);
    k.rmsnorm->backward_add(exec_, x, norm_weight(L.w_in), a.rstd1, d, dx, part);
    tp_grad_sum(part, L.g_in);
  } else {
    k.rmsnorm->backward_add(exec_, x, norm_weight(L.w_in), a.rstd1, d, dx, L.g_in);
  }
}

// y [T, H] += sigmoid(xn2 . w_gate) * down(swiglu(gate_up(xn2))) (Qwen3_5MoeSparseMoeBlock's
// shared expert). The gate is one dot product per token, in f32. LoRA (model/lora.h): the
// shared expert's gate/up adapters add into their rows of the fused gate_up output, down_proj's
// into the down output, shared_expert_gate's into the gate logit, as the dense MLP's do.
// With tensor parallelism (SI: this rank's share) `out` and so y's addition are this rank's partial
// sums, reduced over tp with the routed experts' by the caller.
void DecoderModel::shared_expert_forward(size_t l, LayerActs& a, Tensor& y, int64_t T) {
  const Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const int64_t H = cfg_.hidden_size, SI = cfg_.shared_expert_intermediate_size / tp_.size();
  a.sgu = f32({T, 2 * SI});
  k.linear->forward(exec_, a.xn2, L.w_sgu, a.sgu, compute_);
  lora_forward_group(l, LoraGroup::SharedGateUp, a.xn2, &a.sgu, a);
  a.sact = f32({T, SI});
  k.swiglu->forward(exec_, a.sgu, a.sact);
  Tensor out = f32({T, H});
  k.linear->forward(exec_, a.sact, L.w_sdown, out, compute_);
  lora_forward_group(l, LoraGroup::SharedDown, a.sact, &out, a);
  Tensor zl;  // shared_expert_gate's adapter: its addition to the gate logit [T, 1]
  if (lora_targets(l, LoraGroup::SharedGate)) {
    zl = Tensor::zeros({T, 1}, DType::F32);
    lora_forward_group(l, LoraGroup::SharedGate, a.xn2, &zl, a);
  }
  a.sgate = f32({T});
  shared_gate_forward(exec_, a.xn2, L.w_sgate, zl, out, y, a.sgate);
}

// dy [T, H] = d(block output); dxn2 += the shared expert's and its gate's input gradients.
// With tensor parallelism out is this rank's partial sum, so is d(logit) (linear in out): dxn2 gets
// partial sums as the caller expects, and the gate weight's partial gradient is summed over tp.
void DecoderModel::shared_expert_backward(size_t l, LayerActs& a, const Tensor& dy, Tensor& dxn2, int64_t T) {
  Layer& L = layers_[l];
  const KernelSet& k = kernels_[l];
  const int64_t H = cfg_.hidden_size, SI = cfg_.shared_expert_intermediate_size / tp_.size();
  // out = down(act) again (not kept; with down_proj's adapter, whose x A^T this recomputes), for
  // the gate's gradient d(logit) = s (1 - s) (dy . out).
  Tensor out = f32({T, H});
  k.linear->forward(exec_, a.sact, L.w_sdown, out, compute_);
  lora_forward_group(l, LoraGroup::SharedDown, a.sact, &out, a);
  Tensor dout = f32({T, H}), dlogit = f32({T, 1});
  shared_gate_backward(exec_, dy, out, a.sgate, dout, dlogit);
  out = Tensor();
  Tensor dact = f32({T, SI});
  k.linear->backward(exec_, a.sact, L.w_sdown, dout, &dact, grad_or_null(L.g_sdown), compute_);
  lora_backward_group(l, LoraGroup::SharedDown, a.sact, a, dout, dact);
  Tensor dgu = f32({T, 2 * SI});
  k.swiglu->backward(exec_, a.sgu, dact, dgu);
  Tensor dx = f32({T, H});
  k.linear->backward(exec_, a.xn2, L.w_sgu, dgu, &dx, grad_or_null(L.g_sgu), compute_);
  lora_backward_group(l, LoraGroup::SharedGateUp, a.xn2, a, dgu, dx);
  lora_backward_group(l, LoraGroup::SharedGate, a.xn2, a, dlogit, dx);  // dx += d(logit) B A (scaled)
  // gate: dxn2 += dx + dlogit w_gate; d(w_gate) += sum_t dlogit x
  if (tp_.on() && L.g_sgate.defined()) {
    Tensor part = Tensor::zeros(L.w_sgate.shape(), DType::F32);
    shared_gate_backward_input(exec_, a.xn2, L.w_sgate, dlogit, dx, dxn2, part);
    tp_grad_sum(part, L.g_sgate);
  } else {
    shared_gate_backward_input(exec_, a.xn2, L.w_sgate, dlogit, dx, dxn2, L.g_sgate);
  }
  a.sgu = a.sact = a.sgate = Tensor();
}

}  // namespace titan
