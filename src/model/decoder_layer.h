// The decoder layer's storage and saved activations, shared by the model's two source files:
// decoder.cpp (parameters, init, the passes) and decoder_layer.cpp (one layer's forward and backward).
#pragma once
#include <vector>

#include "model/decoder.h"

namespace titan {

// Small helpers of the layer files (model/layers/, decoder_layer.cpp, decoder.cpp).
namespace layer_util {
inline Tensor f32(const Shape& s) { return Tensor::empty(s, DType::F32); }
// A weight gradient to accumulate into, or null for a frozen weight (DecoderModel::freeze_base).
inline Tensor* grad_or_null(Tensor& g) { return g.defined() ? &g : nullptr; }
// The dtype of activations only a GEMM reads: bf16 under bf16 compute, else f32.
inline DType gemm_input_dtype(DType compute) { return compute == DType::BF16 ? DType::BF16 : DType::F32; }
}  // namespace layer_util

// Saved activations of one decoder layer. Which are kept depends on the checkpointing mode; the
// rest are recomputed from the layer input (Full) or from the attention block output (Selective).
// Shapes as in decoder.h (T tokens, W = Q + 2K). With bf16 compute the inputs that only a bf16 GEMM
// reads (xn1, a dense layer's xn2 and act) are kept in bf16, written so by the op that makes them.
struct LayerActs {
  // attention block
  Tensor xn1, rstd1;      // [T, H], [T]
  Tensor qkv;             // [T, W] projections (+ bias) before the q/k norm; attention reads v from it
  Tensor rstd_q, rstd_k;  // [T * heads], [T * kv_heads]
  Tensor q, k;            // [B, S, heads, D], [B, S, kv_heads, D] after norm + RoPE
  Tensor attn, lse;       // [T, Q], [B, heads, S]
  Tensor h;               // [T, H] residual after attention
  // MLP block
  Tensor xn2, rstd2;      // [T, H], [T]
  Tensor gu, act;         // [T, 2I], [T, I]  (dense MLP)
  MoESaved moe;           // sparse MLP: routing and the variant's saved activations
  Tensor sgu, sact, sgate;  // qwen3_5_moe shared expert: [T, 2 SI], [T, SI], sigmoid(gate logit) [T]
  // Gated attention (Qwen3.5): attn above is the attention output, gated = attn * sigmoid(gate) [T, Q].
  Tensor gated;
  // Gated DeltaNet (model/layers/gated_deltanet.cpp): qkv above holds the fused in_proj output
  // [T, C + VD + 2 Hv]; conv_x its conv input [B, S, C], conv_y = silu(conv) [B, S, C]; q, k, v the
  // delta rule's operands; g, beta [B, S, Hv]; o its output [B, S, Hv, dv]; z the gate [T * Hv, dv];
  // y = gated_rmsnorm(o, z) [T, VD] (out_proj's input).
  Tensor conv_x, conv_y, lq, lk, lv, lg, lbeta, lo, lz, ly;
  std::vector<Tensor> lora_t;  // per adapter of the layer (DecoderModel::lora_layer_): x A^T [T, r]
  bool have_attn = false, have_mlp = false;
};

// A training pass's scope (forward_backward, a pipeline stage pass): LoRA dropout is on inside it
// only, since lora_dropout reads the pass's sequence length from `seq` (DecoderModel::lora_seq_).
struct TrainPass {
  int64_t& seq;
  TrainPass(int64_t& seq_slot, int64_t S) : seq(seq_slot) { seq = S; }
  ~TrainPass() { seq = 0; }
  TrainPass(const TrainPass&) = delete;
  TrainPass& operator=(const TrainPass&) = delete;
};

// What a training forward keeps for its backward.
struct ActivationStore {
  std::vector<Tensor> x;          // [n_layers + 1]: each layer's input [T, H], then the last output
  std::vector<LayerActs> layers;  // per layer, by the checkpointing mode
};

struct DecoderModel::Layer {
  Tensor w_in, w_qkv, w_qn, w_kn, w_o, w_post, w_gu, w_down;  // fused storage
  Tensor g_in, g_qkv, g_qn, g_kn, g_o, g_post, g_gu, g_down;  // their grads
  Tensor b_qkv, gb_qkv;  // q/k/v biases [Q + 2K] and grad (qwen2; undefined otherwise)
  // Qwen3.5. Gated attention: w_qkv is [2Q + 2K, H] (q_proj's query/gate rows, k, v). Gated
  // DeltaNet: w_qkv is the fused in_proj [C + VD + 2 Hv, H] (qkv, z, b, a), w_o the out_proj, and
  // these its conv1d [C, 1, K], dt_bias, A_log [Hv] and gated norm [dv].
  Tensor w_conv, w_dt, w_alog, w_gnorm, g_conv, g_dt, g_alog, g_gnorm;
  // qwen3_5_moe: the shared expert's gate/up [2 SI, H], down [H, SI] and its gate [1, H].
  Tensor w_sgu, w_sdown, w_sgate, g_sgu, g_sdown, g_sgate;
  // Its mixer and MLP (ModelConfig::layer_kind); the weights below are those of its kinds.
  LayerKind kind;
  bool moe() const { return kind.mlp == MlpKind::MoE; }
  // MoE layers (w_gu / w_down unused): router [E, H], stacked experts [E, 2I, H], [E, H, I].
  Tensor w_router, w_egu, w_edown, g_router, g_egu, g_edown;
};

// Walks a pass's schedule (model/unit_schedule.h): the hook steps are applied in order, and each
// compute step announces itself with at(unit, phase), which applies the hook steps before it and
// checks that this Run is the schedule's next one, so the schedule and the code cannot drift.
class DecoderModel::Steps {
 public:
  Steps(DecoderModel& m, Pass pass) : m_(m), s_(unit_schedule(m.cfg_, pass, m.ckpt_)) {}
  Steps(DecoderModel& m, std::vector<UnitStep> schedule) : m_(m), s_(std::move(schedule)) {}  // a stage's
  void at(int64_t unit, Phase phase) {
    for (; i_ < s_.size() && s_[i_].kind != UnitStep::Kind::Run; ++i_) m_.apply(s_[i_]);
    const UnitStep want{UnitStep::Kind::Run, unit, UnitUse::None, phase};
    TITAN_ASSERT(i_ < s_.size() && s_[i_] == want, "the model computes '", step_str(want), "' where its schedule has '",
                 i_ < s_.size() ? step_str(s_[i_]) : std::string("its end"), "'");
    ++i_;
  }
  // The steps after the last Run, then the end of the pass.
  void finish() {
    for (; i_ < s_.size(); ++i_) {
      TITAN_ASSERT(s_[i_].kind != UnitStep::Kind::Run, "the pass ended before its schedule's '", step_str(s_[i_]), "'");
      m_.apply(s_[i_]);
    }
    if (m_.hooks_) m_.hooks_->end_pass();
  }

 private:
  DecoderModel& m_;
  std::vector<UnitStep> s_;
  size_t i_ = 0;
};

struct DecoderModel::Bf16Weights {
  std::vector<Tensor> qkv, o, gu, down;  // per layer, BF16
};

}  // namespace titan
