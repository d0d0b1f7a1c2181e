// Qwen3-MoE configuration (config.json in the transformers 4.x and 5.x layouts, sparse-layer rule,
// flavors, parameter names), active-parameter FLOPs, and the expert state-dict adapter (per-expert
// and fused checkpoint layouts, export round trip).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../io/io_test_util.h"
#include "model/hf_checkpoint.h"
#include "io/safetensors.h"
#include "io/token_lines.h"
#include "model/flops.h"
#include "model/hf_model.h"
#include "util/strings.h"

using namespace titan;
using namespace titan::iotest;
using nlohmann::json;

namespace {

json moe_json() {
  return json{{"model_type", "qwen3_moe"}, {"architectures", {"Qwen3MoeForCausalLM"}}, {"vocab_size", 64},
              {"hidden_size", 16}, {"intermediate_size", 24}, {"num_hidden_layers", 4}, {"num_attention_heads", 2},
              {"num_key_value_heads", 1}, {"head_dim", 8}, {"moe_intermediate_size", 6}, {"num_experts_per_tok", 2}};
}

ModelConfig parse(const json& j) { return parse_hf_config(j.dump(), "config.json"); }

}  // namespace

TEST(MoEConfig, Transformers4And5LayoutsParseAlike) {
  json v4 = moe_json();  // 4.x: num_experts, rope_theta, torch_dtype
  v4["num_experts"] = 8;
  v4["rope_theta"] = 5e5;
  v4["torch_dtype"] = "bfloat16";
  json v5 = moe_json();  // 5.x: num_local_experts, rope_parameters, dtype
  v5["num_local_experts"] = 8;
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  v5["dtype"] = "bfloat16";
  for (const json& j : {v4, v5}) {
    ModelConfig c = parse(j);
    EXPECT_TRUE(c.is_moe());
    EXPECT_EQ(c.num_experts, 8);
    EXPECT_EQ(c.num_experts_per_tok, 2);
    EXPECT_EQ(c.moe_intermediate_size, 6);
    EXPECT_EQ(c.rope_theta, 5e5);
    // Qwen3MoeConfig's defaults for the absent fields
    EXPECT_FALSE(c.norm_topk_prob);
    EXPECT_EQ(c.decoder_sparse_step, 1);
    EXPECT_TRUE(c.mlp_only_layers.empty());
    EXPECT_DOUBLE_EQ(c.router_aux_loss_coef, 0.001);
    EXPECT_FALSE(c.output_router_logits);
    EXPECT_EQ(c.num_sparse_layers(), 4);
  }
  json absent = moe_json();  // num_experts absent: 128
  EXPECT_EQ(parse(absent).num_experts, 128);
  // The exported config.json parses back to the same MoE fields.
  json j = moe_json();
  j["num_experts"] = 8, j["decoder_sparse_step"] = 2, j["mlp_only_layers"] = {3}, j["norm_topk_prob"] = true;
  j["output_router_logits"] = true, j["router_aux_loss_coef"] = 0.25;
  ModelConfig a = parse(j);
  ModelConfig b = parse_hf_config(hf_config_json(a, DType::F32), "export");
  EXPECT_EQ(b.num_experts, 8);
  EXPECT_EQ(b.decoder_sparse_step, 2);
  EXPECT_EQ(b.mlp_only_layers, std::vector<int64_t>{3});
  EXPECT_TRUE(b.norm_topk_prob);
  EXPECT_TRUE(b.output_router_logits);
  EXPECT_DOUBLE_EQ(b.router_aux_loss_coef, 0.25);
  EXPECT_NE(hf_config_json(a, DType::F32).find("Qwen3MoeForCausalLM"), std::string::npos);
}

TEST(MoEConfig, SparseLayerRuleIsTransformers) {
  json j = moe_json();
  j["num_hidden_layers"] = 6, j["decoder_sparse_step"] = 2, j["mlp_only_layers"] = {3, 4};
  ModelConfig c = parse(j);
  // (i + 1) % 2 == 0 -> 1, 3, 5; 3 is mlp-only
  std::vector<bool> want = {false, true, false, false, false, true};
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(c.layer_is_sparse(i), want[size_t(i)]) << i;
  EXPECT_EQ(c.num_sparse_layers(), 2);
  auto specs = model_param_specs(c);
  auto has = [&](const std::string& n) {
    for (auto& s : specs)
      if (s.name == n) return true;
    return false;
  };
  EXPECT_TRUE(has("model.layers.0.mlp.gate_proj.weight"));
  EXPECT_TRUE(has("model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(has("model.layers.1.mlp.experts.127.down_proj.weight"));
  EXPECT_FALSE(has("model.layers.3.mlp.gate.weight"));
  for (auto& s : specs) {
    if (s.name == "model.layers.1.mlp.gate.weight") {
      EXPECT_EQ(s.shape, (Shape{128, 16}));
    }
    if (s.name == "model.layers.5.mlp.experts.7.gate_proj.weight") {
      EXPECT_EQ(s.shape, (Shape{6, 16}));
    }
    if (s.name == "model.layers.5.mlp.experts.7.down_proj.weight") {
      EXPECT_EQ(s.shape, (Shape{16, 6}));
    }
    if (s.name == "model.layers.0.mlp.up_proj.weight") {
      EXPECT_EQ(s.shape, (Shape{24, 16}));
    }
  }
  j["num_experts"] = 0;  // HF: no experts -> every layer dense
  EXPECT_EQ(parse(j).num_sparse_layers(), 0);
}

TEST(MoEConfig, BadFieldsAreOneLineErrors) {
  auto err = [](json j) { return error_of([&] { parse(j); }); };
  json j = moe_json();
  j["num_experts"] = 4, j["num_experts_per_tok"] = 5;
  EXPECT_NE(err(j).find("num_experts_per_tok must be in [1, num_experts = 4], got 5"), std::string::npos) << err(j);
  j = moe_json();
  j["num_experts"] = 4, j["num_local_experts"] = 8;
  EXPECT_NE(err(j).find("num_experts (4) and num_local_experts (8) disagree"), std::string::npos) << err(j);
  j = moe_json();
  j["architectures"] = {"Qwen3ForCausalLM"};
  EXPECT_NE(err(j).find("has no \"Qwen3MoeForCausalLM\""), std::string::npos) << err(j);
  j = moe_json();
  j["mlp_only_layers"] = "0";
  EXPECT_NE(err(j).find("field \"mlp_only_layers\" must be a list of layer indices"), std::string::npos) << err(j);
  j = moe_json();
  j["decoder_sparse_step"] = 0;
  EXPECT_NE(err(j).find("field \"decoder_sparse_step\" must be a positive integer"), std::string::npos) << err(j);
}

TEST(MoEConfig, PublishedFlavorsAndActiveParams) {
  // Qwen3-30B-A3B: 30.5B parameters, 3.3B activated (model card); computed from the shapes.
  ModelConfig c = flavor_config("30B-A3B");
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  ModelSize s = model_size(c, 4096);
  EXPECT_EQ(s.params, 30532122624);
  EXPECT_EQ(s.active_params, 3353032704);
  EXPECT_EQ(s.matmul_params, s.active_params - 151936 * 2048);  // untied: the head counts once
  EXPECT_DOUBLE_EQ(s.flops_per_token, 6.0 * double(s.matmul_params) + 12.0 * 48 * 32 * 128 * 4096);
  // Qwen3-235B-A22B: 235B total, 22B activated.
  ModelSize b = model_size(flavor_config("235B-A22B"), 4096);
  EXPECT_NEAR(double(b.params) / 1e9, 235.1, 0.1);
  EXPECT_NEAR(double(b.active_params) / 1e9, 22.2, 0.1);
  // The guide's reduced recipe: 30B-A3B cut to 4 layers, 64 experts, top-4: about 1.9B parameters
  // and 16 bytes each of f32 training state (weights, grads, AdamW moments) = about 28 GiB.
  c.num_hidden_layers = 4, c.num_experts = 64, c.num_experts_per_tok = 4;
  ModelSize r = model_size(c, 2048);
  EXPECT_EQ(r.params, 1906330624);
  EXPECT_GT(double(r.param_bytes() + r.grad_bytes() + r.optimizer_bytes()), 24.0 * double(1ull << 30));
  ModelSize d = model_size(flavor_config("debug-moe"), 64);
  EXPECT_LT(d.active_params, d.params);
}

namespace {

// A tiny MoE model with distinct weights everywhere, step-2 sparsity (layer 1 sparse, 0 dense).
std::unique_ptr<DecoderModel> tiny_moe() {
  ModelConfig c = flavor_config("debug-moe");  // shrunk: 2 layers, small vocabulary and widths
  c.vocab_size = 512, c.hidden_size = 64, c.intermediate_size = 160, c.num_hidden_layers = 2;
  c.num_attention_heads = 4, c.num_key_value_heads = 2, c.moe_intermediate_size = 32, c.tie_word_embeddings = false;
  c.decoder_sparse_step = 2;
  auto m = std::make_unique<DecoderModel>(c, "cpu");
  m->init_weights(InitScheme::HF, 7);
  int seed = 0;
  for (auto& p : m->params().all()) p.value.copy_(exact_tensor(p.value.shape(), seed++));
  return m;
}

void expect_same_params(DecoderModel& a, DecoderModel& b) {
  ASSERT_EQ(a.params().all().size(), b.params().all().size());
  for (size_t i = 0; i < a.params().all().size(); ++i) {
    const Param &p = a.params().all()[i], &q = b.params().all()[i];
    ASSERT_EQ(p.name, q.name);
    ASSERT_EQ(p.value.shape(), q.value.shape());
    for (int64_t k = 0; k < p.value.numel(); ++k)
      ASSERT_EQ(p.value.data<float>()[k], q.value.data<float>()[k]) << p.name << " [" << k << "]";
  }
}

}  // namespace

TEST(MoEStateDict, PerExpertExportRoundTrip) {
  TempDir d;
  auto m = tiny_moe();
  HfExportOptions opt;
  opt.dtype = DType::F32;
  write_file_atomic(d / "tokenizer.json", "{}");
  opt.tokenizer_dir = d.path;
  export_hf_checkpoint(d / "out", m->config(), model_state(*m), opt);
  auto f = SafetensorsFile::open(d / "out/model.safetensors");
  EXPECT_TRUE(f.contains("model.layers.1.mlp.experts.7.up_proj.weight"));  // per-expert names written
  EXPECT_FALSE(f.contains("model.layers.1.mlp.experts.gate_up_proj"));
  auto back = load_hf_model(d / "out", "cpu");
  EXPECT_TRUE(back->config().is_moe());
  EXPECT_EQ(back->config().decoder_sparse_step, 2);
  expect_same_params(*m, *back);
}

TEST(MoEStateDict, FusedLayoutLoadsIntoTheSameModel) {
  TempDir d;
  auto m = tiny_moe();
  const ModelConfig& c = m->config();
  // Write the fused layout: every non-expert param by name, then the stacked expert tensors.
  std::vector<NamedTensor> ts;
  for (auto& p : m->params().all())
    if (p.name.find(".mlp.experts.") == std::string::npos) ts.push_back({p.name, p.value});
  ts.push_back({"model.layers.1.mlp.experts.gate_up_proj", *m->expert_gate_up(1)});
  ts.push_back({"model.layers.1.mlp.experts.down_proj", *m->expert_down(1)});
  std::filesystem::create_directories(d / "fused");
  write_file_atomic(d / "fused/config.json", hf_config_json(c, DType::F32));
  save_safetensors(d / "fused/model.safetensors", ts);
  HfCheckpoint ck = HfCheckpoint::open(d / "fused");
  EXPECT_EQ(ck.fused_experts(1).gate_up, "model.layers.1.mlp.experts.gate_up_proj");
  EXPECT_TRUE(ck.fused_experts(0).gate_up.empty());
  // Per-expert access through the adapter: expert 3's up_proj is rows [I, 2I) of gate_up[3].
  Tensor up3 = ck.get("model.layers.1.mlp.experts.3.up_proj.weight");
  const Tensor& want = m->params().at("model.layers.1.mlp.experts.3.up_proj.weight").value;
  ASSERT_EQ(up3.shape(), want.shape());
  for (int64_t k = 0; k < up3.numel(); ++k) ASSERT_EQ(up3.data<float>()[k], want.data<float>()[k]);
  auto back = load_hf_model(d / "fused", "cpu");
  expect_same_params(*m, *back);
  // Exporting the fused-loaded model writes the per-expert layout again.
  HfExportOptions opt;
  opt.dtype = DType::F32;
  write_file_atomic(d / "tokenizer.json", "{}");
  opt.tokenizer_dir = d.path;
  export_hf_checkpoint(d / "again", back->config(), model_state(*back), opt);
  EXPECT_TRUE(SafetensorsFile::open(d / "again/model.safetensors").contains("model.layers.1.mlp.experts.0.gate_proj.weight"));

  // Half a fused pair, or both layouts in one layer, are errors naming the layer.
  ts.pop_back();
  save_safetensors(d / "fused/model.safetensors", ts);
  EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d / "fused"), "layer 1 has \"model.layers.1.mlp.experts.gate_up_proj\" but not");
  ts.push_back({"model.layers.1.mlp.experts.down_proj", *m->expert_down(1)});
  ts.push_back({"model.layers.1.mlp.experts.0.gate_proj.weight",
                m->params().at("model.layers.1.mlp.experts.0.gate_proj.weight").value});
  save_safetensors(d / "fused/model.safetensors", ts);
  EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d / "fused"), "layer 1 stores its experts both fused");
  // A fused tensor of the wrong shape.
  ts.pop_back();
  ts.back() = {"model.layers.1.mlp.experts.down_proj", Tensor::zeros({c.num_experts, c.hidden_size, 3}, DType::F32)};
  save_safetensors(d / "fused/model.safetensors", ts);
  EXPECT_ERROR_CONTAINS(HfCheckpoint::open(d / "fused"), "has shape [8, 64, 3] but config.json implies [8, 64, 32]");
}

// The transformers fixture rewritten in the fused layout gives the same loss.
TEST(MoEStateDict, FusedFixtureScoresLikeThePerExpertOne) {
  const std::string src = std::string(TITAN_FIXTURES) + "/qwen3_moe/aux_norm";
  auto ref = load_hf_model(src, "cpu");
  TempDir d;
  std::vector<NamedTensor> ts;
  for (auto& p : ref->params().all())
    if (p.name.find(".mlp.experts.") == std::string::npos) ts.push_back({p.name, p.value});
  for (int64_t l = 0; l < ref->config().num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
    ts.push_back({p + "gate_up_proj", *ref->expert_gate_up(l)});
    ts.push_back({p + "down_proj", *ref->expert_down(l)});
  }
  write_file_atomic(d / "config.json", read_file(src + "/config.json"));
  save_safetensors(d / "model.safetensors", ts);
  auto fused = load_hf_model(d.path, "cpu");
  Tensor ids = read_token_lines(src + "/tokens.txt");
  Tensor labels = ids;  // any labels: both models see the same
  EXPECT_EQ(ref->forward(ids, labels), fused->forward(ids, labels));
}

// Auxiliary-loss-free balancing: forward_backward counts routed tokens, the bias steers only the
// choice, and update_expert_bias applies torchtitan's centered sign step.
TEST(MoEExpertBias, CountsSteerAndUpdate) {
  auto m = tiny_moe();  // layer 1 sparse, 8 experts, top-2
  for (auto& p : m->params().all()) {  // small weights: a well-conditioned forward
    float* v = p.value.data<float>();
    for (int64_t i = 0; i < p.value.numel(); ++i) v[i] *= 0.01f;
  }
  m->enable_expert_bias();
  ASSERT_TRUE(m->has_expert_bias());
  auto st = m->expert_bias_state();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].name, "model.layers.1.mlp.expert_bias");
  EXPECT_EQ(st[1].name, "model.layers.1.mlp.tokens_per_expert");
  Tensor ids = Tensor::empty({2, 5}, DType::I64);
  for (int64_t i = 0; i < 10; ++i) ids.data<int64_t>()[i] = (i * 37) % 512;
  m->params().zero_grad();
  m->forward_backward(ids, ids, 0.1f);
  const float* cnt = st[1].tensor.data<float>();
  double total = 0, mean = 0;
  std::vector<float> c(cnt, cnt + 8);
  for (float x : c) total += x;
  EXPECT_EQ(total, 10.0 * 2);  // every token's top-2 slots
  mean = total / 8;
  m->update_expert_bias(0.5f);
  const float* b = st[0].tensor.data<float>();
  double dsum = 0;
  std::vector<double> delta(8);
  for (int e = 0; e < 8; ++e) dsum += delta[size_t(e)] = 0.5 * (mean > c[size_t(e)] ? 1 : mean < c[size_t(e)] ? -1 : 0);
  for (int e = 0; e < 8; ++e) EXPECT_NEAR(b[e], delta[size_t(e)] - dsum / 8, 1e-6) << e;
  for (int e = 0; e < 8; ++e) EXPECT_EQ(cnt[e], 0.f);  // counts cleared
  // A dominant bias sends every token to experts 0 and 1 (the bias ranks, the weights do not).
  float* bw = st[0].tensor.data<float>();
  for (int e = 0; e < 8; ++e) bw[e] = e < 2 ? 100.f : 0.f;
  m->forward_backward(ids, ids, 0.1f);
  EXPECT_EQ(cnt[0], 10.f);
  EXPECT_EQ(cnt[1], 10.f);
}
