#include <gtest/gtest.h>

#include "model/flops.h"

using namespace titan;

TEST(Flops, PublishedParamCountsAndFormula) {
  // Qwen3-0.6B (the ModelConfig defaults): 596,049,920 parameters, 440,467,456 non-embedding, as
  // the model card states. Tied: the lm_head matmul (V x H) joins N.
  ModelConfig c;
  ModelSize s = model_size(c, 4096);
  EXPECT_EQ(s.params, 596049920);
  EXPECT_EQ(s.embedding_params, 151936 * 1024);
  EXPECT_EQ(s.non_embedding_params(), 440467456);
  EXPECT_EQ(s.matmul_params, 440467456 + 151936 * 1024);
  EXPECT_DOUBLE_EQ(s.flops_per_token, 6.0 * (440467456.0 + 151936.0 * 1024) + 12.0 * 28 * 16 * 128 * 4096);
}

TEST(Flops, SmallConfigByHand) {
  // D 8, I 16, L 2, H 2, KV 1, hd 4, V 100. Per layer: q 8*8 + k,v 2*8*4 + o 8*8 + q/k norms 2*4
  // = 200; mlp 3*8*16 = 384; 2 norms 16 -> 600. Final norm 8, embedding 800.
  ModelConfig s;
  s.vocab_size = 100;
  s.hidden_size = 8;
  s.intermediate_size = 16;
  s.num_hidden_layers = 2;
  s.num_attention_heads = 2;
  s.num_key_value_heads = 1;
  s.head_dim = 4;
  s.tie_word_embeddings = true;
  ModelSize t = model_size(s, 10);
  EXPECT_EQ(t.params, 2 * 600 + 8 + 800);
  EXPECT_DOUBLE_EQ(t.flops_per_token, 6.0 * (1208 + 800) + 12.0 * 2 * 2 * 4 * 10);
  s.tie_word_embeddings = false;  // lm_head is its own parameter: same matmul count, more params
  ModelSize u = model_size(s, 10);
  EXPECT_EQ(u.params, 2808);
  EXPECT_EQ(u.matmul_params, t.matmul_params);
}

TEST(Flops, BenchmarkModelMatchesTheIssueFigures) {
  // hidden 512, 8 layers, 8/4 heads, head_dim 64, ffn 1536, vocab 151936, tied, seq 512: the
  // issue quotes PyTorch at 539 tokens/s = 0.35 TFLOP/s, i.e. about 649 MFLOP/token.
  ModelConfig b;
  b.hidden_size = 512;
  b.num_hidden_layers = 8;
  b.num_attention_heads = 8;
  b.num_key_value_heads = 4;
  b.head_dim = 64;
  b.intermediate_size = 1536;
  ModelSize s = model_size(b, 512);
  EXPECT_NEAR(s.flops_per_token * 539 / 1e12, 0.35, 0.005);
}
