// ParamSpec (model/param_spec.h): every parameter's unit, role, init and placement declared in one
// place, and the decoder built on them (its params in spec order, stored in the spec's dtype).
#include <gtest/gtest.h>

#include <map>

#include "common/test_util.h"
#include "model/config.h"
#include "model/decoder.h"

using namespace titan;

namespace {

std::map<std::string, ParamSpec> by_name(const ModelConfig& c) {
  std::map<std::string, ParamSpec> m;
  for (const ParamSpec& s : model_param_specs(c)) m[s.name] = s;
  return m;
}

}  // namespace

TEST(ParamSpec, RolesInitsAndPlacementsOfADenseLayer) {
  ModelConfig c = flavor_config("debug-tiny");
  c.tie_word_embeddings = false;
  const auto m = by_name(c);
  const ParamSpec& q = m.at("model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(q.unit, 2);
  EXPECT_EQ(q.layer, 1);
  EXPECT_EQ(q.role, ParamRole::Matmul);
  EXPECT_EQ(q.init, InitKind::InputSide);
  EXPECT_EQ(q.placement.tp_dim, 0);  // column parallel
  const ParamSpec& o = m.at("model.layers.1.self_attn.o_proj.weight");
  EXPECT_EQ(o.init, InitKind::OutputSide);
  EXPECT_EQ(o.placement.tp_dim, 1);  // row parallel
  EXPECT_EQ(m.at("model.layers.0.mlp.up_proj.weight").init, InitKind::OutputSide);
  EXPECT_EQ(m.at("model.layers.0.mlp.down_proj.weight").placement.tp_dim, 1);
  EXPECT_TRUE(m.at("model.layers.0.input_layernorm.weight").placement.replicated());
  EXPECT_EQ(m.at("model.layers.0.self_attn.q_norm.weight").role, ParamRole::Norm);
  EXPECT_EQ(m.at("model.embed_tokens.weight").init, InitKind::Embedding);
  EXPECT_EQ(m.at("lm_head.weight").init, InitKind::Output);
  EXPECT_EQ(m.at("lm_head.weight").unit, c.num_hidden_layers + 1);
  EXPECT_EQ(m.at("lm_head.weight").dtype(DType::BF16), DType::BF16);
  EXPECT_EQ(m.at("model.norm.weight").dtype(DType::BF16), DType::F32);
  // Tied: the embedding is the output layer (torchtitan writes its init last).
  c.tie_word_embeddings = true;
  EXPECT_EQ(by_name(c).at("model.embed_tokens.weight").init, InitKind::Output);
  EXPECT_EQ(by_name(c).count("lm_head.weight"), 0u);
}

TEST(ParamSpec, MoeRouterAndExpertsAndQwen2Biases) {
  const ModelConfig moe = flavor_config("debug-moe");
  int64_t sparse = -1;
  for (int64_t l = 0; l < moe.num_hidden_layers && sparse < 0; ++l)
    if (moe.layer_kind(l).mlp == MlpKind::MoE) sparse = l;
  ASSERT_GE(sparse, 0);
  const auto m = by_name(moe);
  const std::string p = "model.layers." + std::to_string(sparse) + ".mlp.";
  EXPECT_EQ(m.at(p + "gate.weight").role, ParamRole::Router);
  EXPECT_EQ(m.at(p + "gate.weight").dtype(DType::BF16), DType::F32);
  EXPECT_TRUE(m.at(p + "experts.0.gate_proj.weight").placement.by_expert);
  EXPECT_EQ(m.at(p + "experts.0.up_proj.weight").init, InitKind::OutputSide);
  ModelConfig q2 = flavor_config("debug-tiny");
  q2.model_type = "qwen2";
  const auto b = by_name(q2);
  EXPECT_EQ(b.at("model.layers.0.self_attn.k_proj.bias").role, ParamRole::Bias);
  EXPECT_EQ(b.at("model.layers.0.self_attn.k_proj.bias").init, InitKind::Zeros);
}

TEST(ParamSpec, LocalShapesSplitTheirTensorParallelDim) {
  const auto m = by_name(flavor_config("0.6B"));
  const ParamSpec& q = m.at("model.layers.0.self_attn.q_proj.weight");  // [2048, 1024]
  EXPECT_EQ(q.local_shape(4), (std::vector<int64_t>{512, 1024}));
  const ParamSpec& down = m.at("model.layers.0.mlp.down_proj.weight");  // [1024, 3072]
  EXPECT_EQ(down.local_shape(4), (std::vector<int64_t>{1024, 768}));
  EXPECT_EQ(m.at("model.norm.weight").local_shape(4), (std::vector<int64_t>{1024}));
  EXPECT_ERROR_HAS(down.local_shape(5), "model.layers.0.mlp.down_proj.weight: dim 1 of [1024, 3072] does not split "
                                        "over 5 tensor-parallel ranks");
}

TEST(ParamSpec, TheDecoderIsBuiltInSpecOrderAndUnits) {
  ModelConfig c = flavor_config("debug-moe");
  DecoderModel model(c);
  const auto& specs = model.param_specs();
  ASSERT_EQ(specs.size(), model.params().all().size());
  for (int64_t u = 0; u < model.num_units(); ++u) {
    const auto [first, last] = model.unit_params(u);
    for (size_t i = first; i < last; ++i) EXPECT_EQ(specs[i].unit, u) << specs[i].name;
  }
}

// LoRA adapters (model/lora.h lora_param_specs): lora_A [r, in] and lora_B [out, r] of each adapter
// in lora_params() order, in their layer's unit, split over tp like their base: lora_B's rows on a
// column-parallel projection (whose rows are the base's), lora_A's columns on a row-parallel one.
TEST(ParamSpec, LoraAdaptersAreSplitLikeTheirBase) {
  const ModelConfig c = flavor_config("0.6B");  // H 1024, Q 2048, K 1024, I 3072
  LoraConfig lc;
  lc.rank = 16;
  lc.target_modules = {"model.layers.3.self_attn.[qo]_proj", "model.layers.3.mlp.*_proj"};
  DecoderModel model(c, "cpu", /*deferred=*/true, /*frozen=*/true);
  model.enable_lora(lc, 1);
  const auto& specs = model.lora_param_specs();
  ASSERT_EQ(specs.size(), model.lora_params().all().size());
  std::map<std::string, ParamSpec> m;
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_EQ(specs[i].name, model.lora_params().all()[i].name);
    EXPECT_EQ(specs[i].unit, 4);
    EXPECT_EQ(specs[i].role, ParamRole::Adapter);
    m[specs[i].name] = specs[i];
  }
  const std::string p = "model.layers.3.";
  const ParamSpec& qa = m.at(p + "self_attn.q_proj.lora_A.weight");
  const ParamSpec& qb = m.at(p + "self_attn.q_proj.lora_B.weight");
  EXPECT_EQ(qa.shape, (std::vector<int64_t>{16, 1024}));
  EXPECT_EQ(qa.init, InitKind::LoraA);
  EXPECT_EQ(qa.local_shape(4), qa.shape);  // replicated
  EXPECT_EQ(qb.init, InitKind::Zeros);
  EXPECT_EQ(qb.local_shape(4), (std::vector<int64_t>{512, 16}));
  const ParamSpec& oa = m.at(p + "self_attn.o_proj.lora_A.weight");
  EXPECT_EQ(oa.local_shape(4), (std::vector<int64_t>{16, 512}));
  EXPECT_EQ(m.at(p + "self_attn.o_proj.lora_B.weight").placement.tp_dim, -1);
  EXPECT_EQ(m.at(p + "mlp.up_proj.lora_B.weight").local_shape(4), (std::vector<int64_t>{768, 16}));
  EXPECT_EQ(m.at(p + "mlp.down_proj.lora_A.weight").local_shape(4), (std::vector<int64_t>{16, 768}));
  EXPECT_EQ(m.at(p + "mlp.gate_proj.lora_A.weight").placement.tp_dim, -1);
}
