#include "model/train_memory.h"

#include <algorithm>

#include "model/flops.h"
#include "ops/cross_entropy/cpu_impl.h"

namespace titan {
namespace {

// The fused lm_head + cross-entropy kernel's row chunk (the same function the kernel uses).
int64_t ce_rows(int64_t n, int64_t v) { return ce_detail::chunk_rows(n, v); }

}  // namespace

TrainMemory predict_train_memory(const ModelConfig& c, int64_t B, int64_t S, Checkpointing ckpt, DType compute,
                                 const LoraConfig* lora, DType base) {
  TITAN_CHECK(!c.is_moe(), "memory prediction covers dense models only (not yet qwen3_moe)");
  TITAN_CHECK(!c.is_qwen3_5(), "memory prediction covers the attention families only (not yet qwen3_5's linear layers)");
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
