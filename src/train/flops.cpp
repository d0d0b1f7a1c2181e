#include "train/flops.h"

namespace titan {

ParamCounts qwen3_param_counts(const ModelConfig& c) {
  const int64_t D = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  int64_t attn = D * c.q_dim() + 2 * D * c.kv_dim() + c.q_dim() * D + 2 * hd;  // q,k,v,o + q_norm,k_norm
  int64_t mlp = 3 * D * I;                                                      // gate, up, down
  int64_t norms = 2 * D;                                                        // input, post-attention
  ParamCounts p;
  p.embedding = c.vocab_size * D;
  p.total = c.num_hidden_layers * (attn + mlp + norms) + D /* final norm */ + p.embedding;
  if (!c.tie_word_embeddings) p.total += c.vocab_size * D;  // lm_head
  return p;
}

double flops_per_token(int64_t non_embedding_params, int64_t n_layers, int64_t n_heads, int64_t head_dim,
                       int64_t seq_len) {
  return 6.0 * double(non_embedding_params) +
         12.0 * double(n_layers) * double(n_heads) * double(head_dim) * double(seq_len);
}

double flops_per_token(const ModelConfig& c, int64_t seq_len) {
  return flops_per_token(qwen3_param_counts(c).non_embedding(), c.num_hidden_layers, c.num_attention_heads,
                         c.head_dim, seq_len);
}

double default_peak_tflops(bool bf16) { return bf16 ? 1.094 : 0.553; }

}  // namespace titan
