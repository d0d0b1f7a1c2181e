// Layer kinds (model/layer_kind.h): read from config.json's layer_types and the MoE sparsity rule,
// what the decoder builds and dispatches on, and the inference state's per-kind slots.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/test_util.h"
#include "core/error.h"
#include "model/config.h"
#include "model/decoder.h"
#include "model/inference_state.h"

using namespace titan;
using nlohmann::json;

namespace {

json tiny_qwen3(int layers) {
  json j = {{"model_type", "qwen3"}, {"vocab_size", 64}, {"hidden_size", 16}, {"intermediate_size", 32},
            {"num_hidden_layers", layers}, {"num_attention_heads", 2}, {"num_key_value_heads", 1},
            {"head_dim", 8}, {"max_position_embeddings", 64}};
  return j;
}

}  // namespace

TEST(LayerKinds, FromLayerTypesAndTheMoeRule) {
  json j = tiny_qwen3(3);
  j["layer_types"] = {"full_attention", "full_attention", "full_attention"};
  const ModelConfig c = parse_hf_config(j.dump(), "m/config.json");
  ASSERT_EQ(c.layer_mixers.size(), 3u);
  for (int64_t l = 0; l < 3; ++l) EXPECT_EQ(c.layer_kind(l), (LayerKind{MixerKind::Attention, MlpKind::Dense}));
  // Qwen3-MoE: sparse every second layer, layer 0 forced dense.
  ModelConfig m = flavor_config("debug-moe");
  m.num_hidden_layers = 4, m.decoder_sparse_step = 2, m.mlp_only_layers = {3};
  EXPECT_EQ(m.layer_kind(0).mlp, MlpKind::Dense);
  EXPECT_EQ(m.layer_kind(1).mlp, MlpKind::MoE);
  EXPECT_EQ(m.layer_kind(3).mlp, MlpKind::Dense);
  EXPECT_EQ(describe_layer(1, m.layer_kind(1)), "layer 1: attention + moe");
  EXPECT_STREQ(hf_layer_type(MixerKind::GatedDeltaNet), "linear_attention");
}

TEST(LayerKinds, LinearAttentionIsRefusedForTheseFamilies) {
  json j = tiny_qwen3(2);
  j["layer_types"] = {"linear_attention", "full_attention"};
  EXPECT_ERROR_HAS(parse_hf_config(j.dump(), "m/config.json"),
                   "m/config.json: layer_types[0] is \"linear_attention\"; only \"full_attention\" is supported for qwen3");
  j["layer_types"] = {"full_attention"};
  EXPECT_ERROR_HAS(parse_hf_config(j.dump(), "m/config.json"), "layer_types has 1 entries but num_hidden_layers is 2");
}

// A family's config carries only its own mixer kinds (Qwen3.5's are model/layers/gated_*.cpp).
TEST(LayerKinds, TheDecoderRefusesAKindItDoesNotBuild) {
  ModelConfig c = flavor_config("debug-tiny");
  c.layer_mixers.assign(size_t(c.num_hidden_layers), MixerKind::Attention);
  c.layer_mixers[1] = MixerKind::GatedDeltaNet;
  EXPECT_ERROR_HAS(DecoderModel m(c),
                   "flavor debug-tiny: qwen3 layers are softmax attention only");
  c.layer_mixers[1] = MixerKind::Attention;
  DecoderModel m(c);
  EXPECT_EQ(m.layer_kinds().size(), size_t(c.num_hidden_layers));
}

TEST(LayerKinds, InferenceStateReservesKeysAndValuesOnlyForAttentionLayers) {
  InferenceState s;
  s.reset({0, 2});
  const std::vector<LayerKind> kinds = {{MixerKind::GatedDeltaNet, MlpKind::Dense},
                                        {MixerKind::GatedAttention, MlpKind::MoE},
                                        {MixerKind::GatedDeltaNet, MlpKind::Dense}};
  EXPECT_EQ(s.capacity(), 0);
  s.reserve(kinds, 2, 4, 5);
  ASSERT_EQ(s.layers.size(), 3u);
  EXPECT_FALSE(s.layers[0].k.defined());
  ASSERT_TRUE(s.layers[1].k.defined());
  EXPECT_EQ(s.layers[1].k.shape(), (Shape{2, 2, 16, 4}));  // [rows, kv heads, capacity, head dim]
  EXPECT_EQ(s.capacity(), 16);
  // Growth keeps the written columns of every (row, kv head), at their [rows, kv heads, capacity,
  // head dim] place in the grown tensor; unwritten columns are not copied.
  auto at = [&](const Tensor& t, int64_t b, int64_t g, int64_t col, int64_t d) -> float& {
    return t.data<float>()[((b * t.dim(1) + g) * t.dim(2) + col) * t.dim(3) + d];
  };
  s.len = 3;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t g = 0; g < 2; ++g)
      for (int64_t col = 0; col < 3; ++col) {
        at(s.layers[1].k, b, g, col, 1) = float(100 * b + 10 * g + col);
        at(s.layers[1].v, b, g, col, 3) = -float(100 * b + 10 * g + col);
      }
  s.reserve(kinds, 2, 4, 17);
  EXPECT_EQ(s.capacity(), 32);
  EXPECT_EQ(s.layers[1].k.shape(), (Shape{2, 2, 32, 4}));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t g = 0; g < 2; ++g)
      for (int64_t col = 0; col < 3; ++col) {
        EXPECT_EQ(at(s.layers[1].k, b, g, col, 1), float(100 * b + 10 * g + col)) << b << g << col;
        EXPECT_EQ(at(s.layers[1].v, b, g, col, 3), -float(100 * b + 10 * g + col)) << b << g << col;
      }
  EXPECT_FALSE(s.layers[2].v.defined());
}

// A bf16 cache (bf16 compute) grows the same way: every (row, kv head)'s written columns move to
// their place in the grown tensor, byte for byte.
TEST(LayerKinds, InferenceStateGrowsABf16Cache) {
  InferenceState s;
  s.reset({0, 1, 0});
  const std::vector<LayerKind> kinds = {{MixerKind::Attention, MlpKind::Dense}};
  s.reserve(kinds, 3, 8, 16, DType::BF16);
  ASSERT_EQ(s.layers[0].k.dtype(), DType::BF16);
  auto at = [&](const Tensor& t, int64_t b, int64_t g, int64_t col, int64_t d) -> uint16_t& {
    return t.data<bf16>()[((b * t.dim(1) + g) * t.dim(2) + col) * t.dim(3) + d].bits;
  };
  s.len = 16;
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t g = 0; g < 3; ++g)
      for (int64_t col = 0; col < 16; ++col) at(s.layers[0].v, b, g, col, 7) = uint16_t(1000 * b + 100 * g + col);
  s.reserve(kinds, 3, 8, 17, DType::BF16);
  EXPECT_EQ(s.layers[0].v.shape(), (Shape{3, 3, 32, 8}));
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t g = 0; g < 3; ++g)
      for (int64_t col = 0; col < 16; ++col)
        EXPECT_EQ(at(s.layers[0].v, b, g, col, 7), uint16_t(1000 * b + 100 * g + col)) << b << g << col;
}
