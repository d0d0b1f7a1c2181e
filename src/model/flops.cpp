#include "model/flops.h"

namespace titan {

double flops_per_token(int64_t matmul_params, int64_t n_layers, int64_t n_heads, int64_t head_dim, int64_t seq_len) {
  return 6.0 * double(matmul_params) + 12.0 * double(n_layers) * double(n_heads) * double(head_dim) * double(seq_len);
}

ModelSize model_size(const ModelConfig& c, int64_t seq_len) {
  ModelSize s;
  for (const auto& p : model_param_specs(c)) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    s.params += n;
    if (p.name == "model.embed_tokens.weight") s.embedding_params += n;
  }
  // Unused experts per token: (E - K) experts of 3 * H * I_moe weights in each sparse layer.
  const int64_t idle = c.num_sparse_layers() * (c.num_experts - c.num_experts_per_tok) * 3 * c.hidden_size *
                       c.moe_intermediate_size;
  s.active_params = s.params - idle;
  s.matmul_params = s.active_params - s.embedding_params + (c.tie_word_embeddings ? c.vocab_size * c.hidden_size : 0);
  if (!c.is_qwen3_5()) {
    s.flops_per_token = flops_per_token(s.matmul_params, c.num_hidden_layers, c.num_attention_heads, c.head_dim, seq_len);
    return s;
  }
  // Qwen3.5: the softmax term for its full-attention layers only, plus the delta rule of each
  // linear layer as the chunked form runs it (chunk C = 16, GatedDeltaOptions): per token and value
  // head, forward 6 dk dv (the state's read by k and q and its rank-1 update) + 2 C (dk + dv) (the
  // causal within-chunk products q k^T, k k^T at half density, and the solve and P U over dv), and
  // backward twice the forward. The conv, gates and norms are elementwise (not counted, as norms).
  int64_t full = 0, linear = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) (c.layer_kind(l).mixer == MixerKind::GatedDeltaNet ? linear : full)++;
  const double C = 16, dk = double(c.linear_key_head_dim), dv = double(c.linear_value_head_dim);
  s.linear_attention_flops =
      3.0 * double(linear) * double(c.linear_num_value_heads) * (6.0 * dk * dv + 2.0 * C * (dk + dv));
  s.flops_per_token = flops_per_token(s.matmul_params, full, c.num_attention_heads, c.head_dim, seq_len) +
                      s.linear_attention_flops;
  return s;
}

}  // namespace titan
