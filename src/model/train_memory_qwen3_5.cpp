// Qwen3.5's step memory prediction (model/train_memory.h): dense or MoE, full fine-tuning or LoRA,
// per layer by its mixer (model/layers/gated_attention.cpp, gated_deltanet.cpp) and its MLP block
// (dense_mlp.cpp, or moe_mlp.cpp with the shared expert of qwen3_5_layer.cpp).
#include <algorithm>

#include "core/threading.h"
#include "model/flops.h"
#include "model/train_memory_parts.h"
#include "ops/cross_entropy/cpu_impl.h"

namespace titan::train_memory_detail {

TrainMemory predict_qwen3_5(const ModelConfig& c, int64_t B, int64_t S, Checkpointing ckpt, DType compute,
                            const LoraConfig* lora, DType base) {
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
  const LoraSizes ls = lora_sizes(c, T, lora);
  TrainMemory m;

  // Saved by the dense MLP block (dense_mlp.cpp): xn2, rstd2, gu, act; its backward frees gu and act.
  MlpSizes dense;
  dense.saved = T * H * bin + T * 4 + T * 2 * I * 4 + T * I * bin;
  dense.bwd = x + T * I * 4 + (bf16 ? T * 2 * I * 2 : 0);  // dxn2, dact (+ bf16 dgu)
  dense.freed = T * 2 * I * 4 + T * I * bin;
  dense.copies = 3 * I * H;
  const MlpSizes sparse = c.is_moe() ? moe_mlp_sizes(c, T, compute, !lora, base) : MlpSizes{};
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

  // The aux loss's logit gradients live from before the head until each sparse layer's backward.
  const int64_t aux = aux_loss_bytes(c, T);
  int64_t kept = (L + 1) * x, copies = 0, layer = 0, layer_tensors = 0, base_bf16 = 0;
  for (int64_t l = 0; l < L; ++l) {
    const bool gdn = c.layer_kind(l).mixer == MixerKind::GatedDeltaNet;
    const MlpSizes& mlp = c.layer_is_sparse(l) ? sparse : dense;
    const int64_t s_mix = gdn ? s_gdn : s_ga, mix_linear = gdn ? R * H + H * VD : W2 * H + H * Q;
    // The adapters' x A^T: a recomputation replaces them, Selective does not drop them.
    const int64_t t = ls.t_mix[size_t(l)] + ls.t_mlp[size_t(l)];
    copies += mix_linear + mlp.copies;
    // A bf16 base stores the mixer's and the MLP's matmul weights (the shared expert's included) in bf16.
    base_bf16 += mix_linear + mlp.copies +
                 (c.layer_is_sparse(l) && c.has_shared_expert() ? 3 * c.shared_expert_intermediate_size * H : 0);
    if (ckpt == Checkpointing::None) kept += s_mix + mlp.saved + t;
    if (ckpt == Checkpointing::Selective) kept += s_mix + t;
    // One layer's backward on top of dx: what checkpointing recomputes, then the MLP's or (once the
    // MLP's backward has freed its part) the mixer's working set (the delta rule's heap counted
    // where it is held), and with LoRA dropout an adapter's dropped input and its gradient.
    const int64_t recompute = ckpt == Checkpointing::Full        ? s_mix + mlp.saved + t
                              : ckpt == Checkpointing::Selective ? mlp.saved
                                                                 : 0;
    const int64_t mix_t = gdn ? std::max(gdn_bwd, delta_tensors) : ga_bwd;
    const int64_t mix = gdn ? std::max(gdn_bwd, delta_tensors + delta_heap) : ga_bwd;
    layer_tensors = std::max(layer_tensors, x + recompute + std::max(mlp.bwd, mix_t - mlp.freed) + ls.drop);
    layer = std::max(layer, x + recompute + std::max(mlp.bwd, mix - mlp.freed) + ls.drop);
  }
  base_bf16 = base != DType::BF16 ? 0 : base_bf16 + (c.tie_word_embeddings ? 0 : V * H);  // + an untied lm_head
  const int64_t trained = lora ? ls.params : ms.params;
  m.rope = rope_bytes(c, S, c.rotary_dim());
  m.weights = (ms.params - base_bf16 + ls.params) * 4 + base_bf16 * 2 + m.rope;
  m.grads = trained * 4;
  m.optimizer = trained * 8;
  // The bf16 copies of the layers' linear weights live through the step (none of a bf16 base).
  const int64_t wbf = bf16 && base != DType::BF16 ? copies * 2 : 0;
  const int64_t rows = ce_detail::chunk_rows(T, V);
  const bool head_stored_bf16 = base == DType::BF16 && !c.tie_word_embeddings;
  const int64_t head =
      3 * x + T * 4 + rows * V * 4 + (bf16 ? rows * V * 2 + (head_stored_bf16 ? 0 : V * H * 2) + rows * H * 2 : 0);
  m.activations = kept + wbf + aux + std::max(head, layer);
  m.heap = m.activations - (kept + wbf + aux + std::max(head, layer_tensors));
  m.weight_copies = wbf;
  return m;
}

}  // namespace titan::train_memory_detail
