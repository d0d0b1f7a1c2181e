// Model FLOPs per token, torchtitan's formula (torchtitan/models/utils.py,
// get_dense_model_nparams_and_flops, as Qwen3 calls it with head_dims = 2 * head_dim):
//
//   flops_per_token = 6 * (nparams - nparams_embedding) + 12 * n_layers * n_heads * head_dim * seq_len
//
// 6N: each weight does one multiply-add (2 FLOPs) in the forward and two in the backward.
// 12 L H d T: the two attention matmuls (QK^T, PV), forward + backward, causal sparsity ignored.
// nparams counts each parameter tensor once (torch's model.parameters() deduplicates a tied
// lm_head), and nparams_embedding is the token embedding. So for a tied model the lm_head matmul
// is not counted at all; for an untied one lm_head.weight is in the 6N term. Norm weights count.
// MFU = flops_per_token * tokens/s / peak FLOP/s.
#pragma once
#include <cstdint>

#include "model/config.h"

namespace titan {

struct ParamCounts {
  int64_t total = 0;      // unique parameters (a tied lm_head is the embedding, counted once)
  int64_t embedding = 0;  // model.embed_tokens.weight
  int64_t non_embedding() const { return total - embedding; }
};

// Parameter counts of Qwen3ForCausalLM computed from the config fields (q/k/v/o projections,
// q_norm/k_norm, the two layer norms, gate/up/down, final norm, embedding, untied lm_head).
ParamCounts qwen3_param_counts(const ModelConfig& c);

// The general formula, for callers that count parameters themselves (MoE: the active ones).
double flops_per_token(int64_t non_embedding_params, int64_t n_layers, int64_t n_heads, int64_t head_dim,
                       int64_t seq_len);
// Dense Qwen3 from its config.
double flops_per_token(const ModelConfig& c, int64_t seq_len);

// Peak FLOP/s of this project's reference machine on 2 threads, as the project brief states it:
// 553 GFLOP/s f32, 1094 GFLOP/s bf16. In TFLOP/s; the config key [metrics] peak_tflops
// replaces it on other machines.
double default_peak_tflops(bool bf16);

}  // namespace titan
