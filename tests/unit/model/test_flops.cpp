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

TEST(Flops, Qwen35SmallConfigByHand) {
  // Layers 0-2 Gated DeltaNet, layer 3 gated attention. H 8, I 16, V 100 (tied), 2/1 heads of 8;
  // linear heads: 1 key, 2 value heads, dk = dv = 4, conv 4.
  ModelConfig c = flavor_config("debug-qwen3_5");
  c.vocab_size = 100, c.hidden_size = 8, c.intermediate_size = 16;
  c.num_attention_heads = 2, c.num_key_value_heads = 1, c.head_dim = 8;
  c.linear_num_key_heads = 1, c.linear_num_value_heads = 2, c.linear_key_head_dim = 4, c.linear_value_head_dim = 4;
  ASSERT_EQ(c.num_hidden_layers, 4);
  // Gated attention: q_proj (query + gate) 8*32, k/v 2*8*8, o 16*8, q/k norms 2*8 -> 528.
  // Gated DeltaNet: key dim 4, value dim 8, conv dim 16; in_proj (qkv 16, z 8, b 2, a 2) 28*8 = 224,
  // conv 16*4, dt_bias + A_log 2*2, gated norm 4, out_proj 8*8 -> 360.
  // Each layer: MLP 3*8*16 = 384, two norms 16. Final norm 8, embedding 100*8.
  const int64_t params = 3 * (360 + 384 + 16) + (528 + 384 + 16) + 8 + 800;
  const int64_t S = 10;
  ModelSize s = model_size(c, S);
  EXPECT_EQ(s.params, params);
  EXPECT_EQ(s.matmul_params, params);  // - embedding + the tied lm_head's matmul (the same 800)
  // Softmax attention on the one full-attention layer: 12 * 1 * heads * head_dim * S.
  const double attention = 12.0 * 1 * 2 * 8 * S;
  // Delta rule (chunk 16), per linear layer and value head, forward 6 dk dv + 2 * 16 * (dk + dv)
  // = 96 + 256, training = 3x forward: 3 layers * 2 heads * 3 * 352.
  const double delta = 3.0 * 2 * 3 * (6 * 4 * 4 + 2 * 16 * (4 + 4));
  EXPECT_DOUBLE_EQ(s.linear_attention_flops, delta);
  EXPECT_DOUBLE_EQ(s.flops_per_token, 6.0 * double(params) + attention + delta);
}
