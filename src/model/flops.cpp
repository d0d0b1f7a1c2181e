#include "model/flops.h"

namespace titan {

ModelSize model_size(const ModelConfig& c, int64_t seq_len) {
  ModelSize s;
  for (const auto& p : model_param_specs(c)) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    s.params += n;
    if (p.name == "model.embed_tokens.weight") s.embedding_params += n;
  }
  const int64_t head = c.vocab_size * c.hidden_size;
  s.matmul_params = s.params - s.embedding_params + (c.tie_word_embeddings ? head : 0);
  // Norm weights are in `params` but not matmuls; they are tiny and torchtitan counts them too.
  s.flops_per_token = 6.0 * double(s.matmul_params) +
                      12.0 * double(c.num_hidden_layers) * double(c.num_attention_heads) * double(c.head_dim) *
                          double(seq_len);
  return s;
}

}  // namespace titan
