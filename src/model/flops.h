// Parameter counts and training FLOPs per token.
//
// torchtitan's formula: flops/token = 6 * N + 12 * n_layers * n_heads * head_dim * seq_len, where
// 6N is one multiply-add per weight forward and two backward, and the second term counts the two
// attention matmuls (QK^T, PV) forward and backward with causal sparsity ignored.
//
// N here is every weight that multiplies activations: all parameters except the embedding
// lookup, PLUS the output projection (lm_head) even when it is tied to the embedding. torchtitan
// takes N = unique parameters - embedding, which drops a tied lm_head entirely (its parameter is
// the embedding); on Qwen3's 151,936-token vocabulary that hides most of a small model's compute
// (75% for the benchmark model), so titan counts the matmul that actually runs. For untied models
// the two agree. Norm weights are counted, as torchtitan does.
//
// Qwen3-MoE: a token runs the router and only num_experts_per_tok of the num_experts experts of
// each sparse layer, so N (and the FLOPs) count the ACTIVE parameters: every parameter minus, per
// sparse layer, the (E - K) experts a token does not use (torchtitan counts MoE FLOPs the same way).
// Qwen3.5: the attention term over its full-attention layers only, plus the chunked delta rule's
// FLOPs of its linear layers (linear_attention_flops; flops.cpp gives the count).
// MFU = flops_per_token * tokens/s / peak FLOP/s (the peak: train/peak_flops.h).
#pragma once
#include <cstdint>

#include "model/config.h"

namespace titan {

struct ModelSize {
  int64_t params = 0;             // unique trainable parameters (a tied lm_head counted once)
  int64_t embedding_params = 0;   // model.embed_tokens.weight
  int64_t active_params = 0;      // parameters one token uses (= params for dense models)
  int64_t matmul_params = 0;      // N above (active parameters only)
  double flops_per_token = 0;     // training (forward + backward)
  double linear_attention_flops = 0;  // Qwen3.5: the delta rule's part of flops_per_token (flops.cpp)
  int64_t non_embedding_params() const { return params - embedding_params; }
  // Training state bytes in f32: weights, grads, AdamW exp_avg + exp_avg_sq.
  int64_t param_bytes() const { return params * 4; }
  int64_t grad_bytes() const { return params * 4; }
  int64_t optimizer_bytes() const { return params * 8; }
};

ModelSize model_size(const ModelConfig& c, int64_t seq_len);

// The formula itself, for callers that count N themselves (MoE: the active parameters).
double flops_per_token(int64_t matmul_params, int64_t n_layers, int64_t n_heads, int64_t head_dim, int64_t seq_len);

}  // namespace titan
