// Parameter counts and training FLOPs per token (torchtitan's accounting).
//   flops/token = 6 * N_matmul + 12 * n_layers * n_heads * head_dim * seq_len
// N_matmul counts every weight that multiplies activations: all non-embedding parameters plus the
// output projection (lm_head), which is counted even when it is tied to the embedding because its
// matmul runs either way. The embedding lookup itself is not a matmul and is excluded.
// The attention term counts QK^T and PV, forward (2 x 2) and backward (2 x 4), as torchtitan does.
#pragma once
#include <cstdint>

#include "model/config.h"

namespace titan {

struct ModelSize {
  int64_t params = 0;             // unique trainable parameters (tied embedding once)
  int64_t embedding_params = 0;   // model.embed_tokens.weight
  int64_t matmul_params = 0;      // N_matmul above
  double flops_per_token = 0;     // training (forward + backward)
  // Training state bytes in f32: weights, grads, AdamW exp_avg + exp_avg_sq.
  int64_t param_bytes() const { return params * 4; }
  int64_t grad_bytes() const { return params * 4; }
  int64_t optimizer_bytes() const { return params * 8; }
};

ModelSize model_size(const ModelConfig& c, int64_t seq_len);

}  // namespace titan
