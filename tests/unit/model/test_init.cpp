// Initialization schemes: torchtitan's on the Qwen3-4B shapes (layers reduced to fit) starts at
// the loss the guide reports for random init, 12.43 = ln(151936) + 0.5: logits of unit variance.
#include <gtest/gtest.h>

#include <cmath>

#include "data/dataset.h"
#include "data/packed_loader.h"
#include "data/tokenizer.h"
#include "model/decoder.h"

using namespace titan;

TEST(Init, Torchtitan4BShapesStartNearTheGuidesRandomInitLoss) {
  ModelConfig c = flavor_config("4B");
  c.num_hidden_layers = 2;
  DecoderModel model(c, "cpu");
  model.init_weights(InitScheme::Torchtitan, 0);
  auto tok = data::Tokenizer::load(data::Tokenizer::default_dir());
  data::DatasetSpec spec;
  spec.progress = false;
  data::PackedLoader loader(data::TokenDataset::load(spec, tok, [](const std::string&) {}));
  data::Batch b = loader.next_batch(1, 128, 0, 1);
  double loss = model.forward(b.inputs, b.labels) / double(count_labels(b.labels));
  EXPECT_NEAR(loss, 12.43, 0.3);
}

TEST(Init, SchemesFollowTheirStds) {
  ModelConfig c = flavor_config("debug-tiny");
  DecoderModel model(c, "reference");
  auto stdev = [&](const char* name) {
    const Tensor& t = model.params().at(name).value;
    double s = 0;
    for (int64_t i = 0; i < t.numel(); ++i) s += double(t.data<float>()[i]) * t.data<float>()[i];
    return std::sqrt(s / double(t.numel()));
  };
  model.init_weights(InitScheme::HF, 1);
  EXPECT_NEAR(stdev("model.layers.0.mlp.down_proj.weight"), 0.02, 0.002);
  EXPECT_EQ(model.params().at("model.layers.0.input_layernorm.weight").value.data<float>()[0], 1.0f);
  model.init_weights(InitScheme::Torchtitan, 1);
  // Depth-scaled output projections: 0.02 / sqrt(2 (layer + 1)).
  EXPECT_NEAR(stdev("model.layers.1.mlp.down_proj.weight"), 0.02 / std::sqrt(4.0), 0.001);
  EXPECT_NEAR(stdev("model.layers.0.self_attn.q_proj.weight"), 0.02, 0.002);
  // Tied: the output init (std dim^-0.5, cut at 3 std) is written last, as torchtitan does.
  EXPECT_NEAR(stdev("model.embed_tokens.weight"), 1.0 / std::sqrt(double(c.hidden_size)) * 0.986, 0.01);
  // Same seed, same weights.
  DecoderModel again(c, "reference");
  again.init_weights(InitScheme::Torchtitan, 1);
  const Tensor& a = model.params().at("model.layers.1.mlp.up_proj.weight").value;
  const Tensor& b = again.params().at("model.layers.1.mlp.up_proj.weight").value;
  EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes()));
}
