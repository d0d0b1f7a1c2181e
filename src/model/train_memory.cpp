#include "model/train_memory.h"

#include <algorithm>

#include "core/threading.h"
#include "model/flops.h"
#include "ops/cross_entropy/cpu_impl.h"

namespace titan {
namespace {

// The fused lm_head + cross-entropy kernel's row chunk (the same function the kernel uses).
int64_t ce_rows(int64_t n, int64_t v) { return ce_detail::chunk_rows(n, v); }

// Dense Qwen3.5 (full fine-tuning): the same parts as the attention families, per layer by its
// mixer (model/layers/gated_attention.cpp, gated_deltanet.cpp; the MLP and the head as above).
TrainMemory predict_qwen3_5(const ModelConfig& c, int64_t B, int64_t S, Checkpointing ckpt, DType compute) {
  const ModelSize ms = model_size(c, S);
  const int64_t T = B * S, H = c.hidden_size, Q = c.q_dim(), K = c.kv_dim(), I = c.intermediate_size;
  const int64_t V = c.vocab_size, L = c.num_hidden_layers, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int64_t W2 = 2 * Q + 2 * K;  // gated attention's q_proj (query and gate), k_proj, v_proj rows
  const int64_t C = c.linear_conv_dim(), VD = c.linear_value_dim(), R = c.linear_in_rows();
  const int64_t Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads, dk = c.linear_key_head_dim;
  const int64_t KD = c.linear_key_dim(), dv = c.linear_value_head_dim;
  const bool bf16 = compute == DType::BF16;
  const int64_t bin = bf16 ? 2 : 4;
  const int64_t x = T * H * 4;
  TrainMemory m;
  // RoPE tables [positions, rotary_dim], cos and sin.
  const int64_t rope_pos = std::max(std::min<int64_t>(c.max_position_embeddings, 4096), S);
  m.rope = 2 * rope_pos * c.rotary_dim() * 4;
  m.weights = ms.params * 4 + m.rope;
  m.grads = ms.params * 4;
  m.optimizer = ms.params * 8;

  // Saved by the MLP block (dense_mlp.cpp): xn2, rstd2, gu, act.
  const int64_t s_mlp = T * H * bin + T * 4 + T * 2 * I * 4 + T * I * bin;
  const int64_t mlp_bwd = x + T * I * 4 + (bf16 ? T * 2 * I * 2 : 0);  // dxn2, dact (+ bf16 dgu)
  // Gated attention. Saved: xn1, rstd1, qkv [T, 2Q + 2K], q and k after norm + RoPE, their rstds,
  // attn, lse, gated = attn * sigmoid(gate), h. Backward at its largest (gated_attention_backward,
  // `gated` already released): dgate, dq, the raw query and its gradient [T, Q] each, dqkv, dxn1,
  // and under bf16 the GEMM's bf16 copy of dqkv.
  const int64_t s_ga = T * H * bin + T * 4 + T * W2 * 4 + T * (Q + K) * 4 + T * (nh + nkv) * 4 + T * Q * 4 +
                       B * nh * S * 4 + T * Q * 4 + x;
  const int64_t ga_bwd = 3 * T * Q * 4 + T * W2 * 4 + x + (bf16 ? T * W2 * 2 : 0);
  // Gated DeltaNet. Saved: xn1, rstd1, the fused in_proj output [T, R], the conv's input and output
  // [T, C], q, k, v (C columns), z, o, y [T, VD], g and beta [T, Hv], h. Backward (y released):
  // dz, dg, dbeta, d(conv out) [T, C], dqkv [T, R], then d(conv in) [T, C] or dxn1 [T, H] (+ bf16 dqkv).
  const int64_t s_gdn = T * H * bin + T * 4 + T * R * 4 + 3 * T * C * 4 + 3 * T * VD * 4 + 2 * T * Hv * 4 + x;
  const int64_t gdn_bwd = T * (C + R + 2 * Hv + std::max(C, H)) * 4 + (bf16 ? T * R * 2 : 0);
  // While the delta rule's backward runs: do, dz [T, VD], dq/dk/dv [T, C], dg, dbeta (y released),
  // and beside them the op's own heap (ops/gated_delta/cpu.cpp, outside the tensor allocator): the
  // normalised q, k and their inverse norms, dq^ and dk^ per value head [T, Hv, dk], and per
  // thread the states entering each chunk of a document (at most S tokens) and the dS / scratch.
  const int64_t delta_tensors = T * (VD + C + 2 * Hv) * 4;
  const int64_t chunk = 16;  // GatedDeltaOptions::chunk
  const int64_t threads = std::min<int64_t>(num_threads(), B * Hv);
  const int64_t delta_heap = T * (2 * KD + 2 * Hk + 2 * Hv * dk) * 4 +
                             threads * ((S + chunk - 1) / chunk + 2) * dk * dv * 4 +
                             threads * (2 * chunk * dv + chunk + 2 * dk * dv + chunk * chunk) * 4;

  int64_t kept = (L + 1) * x, layer_linear = 0, layer = 0, layer_tensors = 0;
  for (int64_t l = 0; l < L; ++l) {
    const bool gdn = c.layer_kind(l).mixer == MixerKind::GatedDeltaNet;
    const int64_t s_mix = gdn ? s_gdn : s_ga;
    layer_linear += (gdn ? R * H + H * VD : W2 * H + H * Q) + 3 * I * H;
    if (ckpt == Checkpointing::None) kept += s_mix + s_mlp;
    if (ckpt == Checkpointing::Selective) kept += s_mix;
    // One layer's backward on top of dx: what checkpointing recomputes, then the MLP's or the
    // mixer's working set (the delta rule's heap counted where it is held).
    const int64_t recompute = ckpt == Checkpointing::Full ? s_mix + s_mlp : ckpt == Checkpointing::Selective ? s_mlp : 0;
    const int64_t mix_t = gdn ? std::max(gdn_bwd, delta_tensors) : ga_bwd;
    const int64_t mix = gdn ? std::max(gdn_bwd, delta_tensors + delta_heap) : ga_bwd;
    layer_tensors = std::max(layer_tensors, x + recompute + std::max(mlp_bwd, mix_t));
    layer = std::max(layer, x + recompute + std::max(mlp_bwd, mix));
  }
  const int64_t wbf = bf16 ? layer_linear * 2 : 0;
  const int64_t rows = ce_rows(T, V);
  const int64_t head = 3 * x + T * 4 + rows * V * 4 + (bf16 ? rows * V * 2 + V * H * 2 + rows * H * 2 : 0);
  m.activations = kept + wbf + std::max(head, layer);
  m.heap = m.activations - (kept + wbf + std::max(head, layer_tensors));
  m.weight_copies = wbf;
  return m;
}

}  // namespace

TrainMemory predict_train_memory(const ModelConfig& c, int64_t B, int64_t S, Checkpointing ckpt, DType compute,
                                 const LoraConfig* lora, DType base) {
  TITAN_CHECK(!c.is_moe(), "memory prediction covers dense models only (not yet ", c.model_type, ")");
  TITAN_CHECK(!c.is_qwen3_5() || !lora, "memory prediction: LoRA on qwen3_5 is not modelled yet (predict without --lora-rank)");
  if (c.is_qwen3_5()) return predict_qwen3_5(c, B, S, ckpt, compute);
  TITAN_CHECK(base == DType::F32 || (base == DType::BF16 && lora && compute == DType::BF16),
              "memory prediction: a bf16 base is a frozen LoRA base computing in bf16");
  const ModelSize ms = model_size(c, S);
  const int64_t T = B * S, H = c.hidden_size, Q = c.q_dim(), K = c.kv_dim(), W = Q + 2 * K, I = c.intermediate_size;
  const int64_t V = c.vocab_size, L = c.num_hidden_layers, nh = c.num_attention_heads, nkv = c.num_key_value_heads;
  const bool bf16 = compute == DType::BF16;
  const int64_t bin = bf16 ? 2 : 4;  // bytes of an input only a GEMM reads
  TrainMemory m;
  int64_t lora_params = 0, t_attn = 0, t_mlp = 0;  // adapter parameters; x A^T bytes per layer, by block
  int64_t drop = 0;  // dropout: an adapter's backward holds dropout(x) and its gradient [T, in] f32
  if (lora) {
    for (const auto& a : lora_select(c, *lora)) {
      if (lora->dropout > 0) drop = std::max(drop, 2 * T * a.in * 4);
      lora_params += a.numel(lora->rank);
      if (a.is_parameter()) continue;  // merged into the weights: no x A^T kept
      (a.group == LoraGroup::Qkv || a.group == LoraGroup::O ? t_attn : t_mlp) += T * lora->rank * 4;
    }
    t_attn /= L, t_mlp /= L;  // every layer alike (patterns usually name all layers; an upper bound otherwise)
  }
  const int64_t trained = lora ? lora_params : ms.params;
  // Weights, plus the RoPE cos/sin tables [positions, head_dim] the model keeps (DecoderModel).
  const int64_t rope_pos = std::max(std::min<int64_t>(c.max_position_embeddings, 4096), S);
  // The layers' linear weights, and the untied lm_head: what a bf16 base keeps in bf16.
  const int64_t layer_linear = L * (W * H + H * Q + 2 * I * H + H * I);
  const int64_t bf16_base = base == DType::BF16 ? layer_linear + (c.tie_word_embeddings ? 0 : V * H) : 0;
  m.rope = 2 * rope_pos * c.head_dim * 4;
  m.weights = (ms.params - bf16_base + lora_params) * 4 + bf16_base * 2 + m.rope;
  m.grads = trained * 4;
  m.optimizer = trained * 8;

  // Saved per layer (LayerActs): the attention block and the MLP block.
  const int64_t s_attn = T * H * bin + T * 4 + T * W * 4 + T * (nh + nkv) * 4 + T * (Q + K) * 4 + T * Q * 4 +
                         B * nh * S * 4 + T * H * 4 + t_attn;
  const int64_t s_mlp = T * H * bin + T * 4 + T * 2 * I * 4 + T * I * bin + t_mlp;
  const int64_t x = T * H * 4;  // a layer input
  int64_t kept = (L + 1) * x;   // store.x
  if (ckpt == Checkpointing::None) kept += L * (s_attn + s_mlp);
  if (ckpt == Checkpointing::Selective) kept += L * s_attn;
  // The bf16 copies of the layers' linear weights live through the step (none of a bf16 base).
  const int64_t wbf = bf16 && base != DType::BF16 ? layer_linear * 2 : 0;
  // Head: xf, dxf, dx [T, H], the logits chunk (and its bf16 dlogits and bf16 lm_head with bf16
  // GEMMs, the lm_head's copy unless a bf16 base stores it so).
  const int64_t rows = ce_rows(T, V);
  const bool head_stored_bf16 = base == DType::BF16 && !c.tie_word_embeddings;
  const int64_t head = 3 * x + T * 4 + rows * V * 4 +
                       (bf16 ? rows * V * 2 + (head_stored_bf16 ? 0 : V * H * 2) + rows * H * 2 : 0);
  // One layer's backward on top of dx: its recomputed activations (checkpointing), then the MLP's
  // dxn2 + dact (+ bf16 dgu) or the attention's dattn + dqkv / dqkv + dxn1.
  const int64_t recompute = ckpt == Checkpointing::Full ? s_attn + s_mlp : ckpt == Checkpointing::Selective ? s_mlp : 0;
  const int64_t mlp_bwd = x + T * I * 4 + (bf16 ? T * 2 * I * 2 : 0);
  const int64_t attn_bwd = T * W * 4 + std::max(T * Q * 4, x);
  const int64_t layer = x + recompute + std::max(mlp_bwd, attn_bwd) + drop;
  m.activations = kept + wbf + std::max(head, layer);
  m.weight_copies = wbf;
  return m;
}

}  // namespace titan
