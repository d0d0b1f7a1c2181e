// The pieces of model/train_memory.cpp's prediction that the dense attention families and Qwen3.5
// share (one process, no parallelism): a MoE MLP block's tensors and the LoRA adapters' sizes.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/lora.h"
#include "model/train_memory.h"

namespace titan::train_memory_detail {

// One MLP block's tensors, in bytes, beside the layer's mixer (T tokens).
struct MlpSizes {
  int64_t saved = 0;  // what the block keeps for its backward (LayerActs: xn2, rstd2, the kind's own)
  int64_t bwd = 0;    // its backward's working set beside dx and the saved tensors (dxn2 included)
  int64_t freed = 0;  // the part of `saved` its backward frees before the mixer's backward runs
  int64_t copies = 0;  // elements of its weights a bf16 step rounds once per step (DecoderModel::wbf_)
};

// A sparse (MoE) layer's MLP block: the grouped-GEMM variant's routing and expert activations
// (ops/moe/grouped_gemm.cpp, expert_ffn.cpp) and, on qwen3_5_moe, the shared expert and its gate
// (model/layers/qwen3_5_layer.cpp). trained: the base's gradients are computed (full fine-tuning);
// base: the dtype the frozen base's matmul weights are stored in.
MlpSizes moe_mlp_sizes(const ModelConfig& c, int64_t T, DType compute, bool trained, DType base);

// The adapters lora_select picks: their parameters, per layer the x A^T [T, r] they keep by block
// (the mixer's: q/k/v/o, Gated DeltaNet's in_proj_* / out_proj; the MLP's and the shared
// expert's), and with dropout the largest adapter input's dropped copy and its gradient [T, in]
// f32 that the adapter's backward holds.
struct LoraSizes {
  int64_t params = 0, drop = 0;
  std::vector<int64_t> t_mix, t_mlp;
};
LoraSizes lora_sizes(const ModelConfig& c, int64_t T, const LoraConfig* lora);

// The RoPE tables [positions, dim] cos and sin that DecoderModel keeps.
inline int64_t rope_bytes(const ModelConfig& c, int64_t S, int64_t dim) {
  return 2 * std::max(std::min<int64_t>(c.max_position_embeddings, 4096), S) * dim * 4;
}

// The auxiliary loss's router-logit gradients [T, E] f32, one per sparse layer, made before the
// head and each freed by its layer's backward (output_router_logits only).
inline int64_t aux_loss_bytes(const ModelConfig& c, int64_t T) {
  return c.is_moe() && c.output_router_logits ? c.num_sparse_layers() * T * c.num_experts * 4 : 0;
}

// Qwen3.5, dense or MoE, full fine-tuning or LoRA (model/train_memory_qwen3_5.cpp).
TrainMemory predict_qwen3_5(const ModelConfig& c, int64_t B, int64_t S, Checkpointing ckpt, DType compute,
                            const LoraConfig* lora, DType base);

}  // namespace titan::train_memory_detail
