// ModelConfig: the flavor table against published parameter counts, config.json parsing (each
// refused field with its message), and hf_config_json round trips.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/flops.h"
#include "common/test_util.h"

using namespace titan;
using nlohmann::json;

namespace {

// A Qwen3-0.6B config.json as transformers 4.51 wrote it.
json qwen3_06b_json() {
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

ModelConfig parse(const json& j) { return parse_hf_config(j.dump(), "cfg/config.json"); }

// The error message of parsing j (empty when it parses).
std::string parse_error(const json& j) {
  try {
    parse(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string parse_error_text(const std::string& text) {
  try {
    parse_hf_config(text, "cfg/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ONE_LINE_HAS(msg, needle)                                       \
  do {                                                                      \
    std::string m_ = (msg);                                                 \
    EXPECT_NE(m_.find(needle), std::string::npos) << "message: " << m_;     \
    EXPECT_EQ(m_.find('\n'), std::string::npos) << "multi-line: " << m_;    \
  } while (0)

}  // namespace

// Published totals (model cards / safetensors index total_size / 2 bytes per bf16 parameter).
TEST(Flavors, ParameterCountsMatchPublishedQwen3) {
  EXPECT_EQ(model_param_count(flavor_config("0.6B")), 596049920);    // Qwen3-0.6B: 0.6B (0.44B non-embedding)
  EXPECT_EQ(model_param_count(flavor_config("1.7B")), 1720574976);   // Qwen3-1.7B: 1.7B (1.4B non-embedding)
  EXPECT_EQ(model_param_count(flavor_config("4B")), 4022468096);     // Qwen3-4B: 4.0B (3.6B non-embedding)
  EXPECT_EQ(model_param_count(flavor_config("8B")), 8190735360);     // Qwen3-8B index total_size 16381470720
  EXPECT_EQ(model_param_count(flavor_config("14B")), 14768307200);   // Qwen3-14B: 14.8B
  EXPECT_EQ(model_param_count(flavor_config("32B")), 32762123264);   // Qwen3-32B: 32.8B
}

TEST(Flavors, ShapesAndNonEmbeddingCounts) {
  ModelConfig c = flavor_config("4B");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_NE(c.head_dim, c.hidden_size / c.num_attention_heads);  // 2560/32 = 80
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(flavor_config("8B").tie_word_embeddings);
  // Model cards quote non-embedding parameters: 0.44B, 1.4B, 3.6B, 6.95B, 13.2B, 31.2B.
  auto non_emb = [](const char* f) {
    ModelConfig c = flavor_config(f);
    int64_t n = model_param_count(c) - c.vocab_size * c.hidden_size * (c.tie_word_embeddings ? 1 : 2);
    return double(n) / 1e9;
  };
  EXPECT_NEAR(non_emb("0.6B"), 0.44, 0.005);
  EXPECT_NEAR(non_emb("1.7B"), 1.4, 0.05);
  EXPECT_NEAR(non_emb("4B"), 3.6, 0.05);
  EXPECT_NEAR(non_emb("8B"), 6.95, 0.005);
  EXPECT_NEAR(non_emb("14B"), 13.2, 0.05);
  EXPECT_NEAR(non_emb("32B"), 31.2, 0.05);
}

TEST(Flavors, DebugFlavorsAndUnknownName) {
  ModelConfig d = flavor_config("debugmodel");
  EXPECT_EQ(d.vocab_size, 151936);
  EXPECT_EQ(d.hidden_size, 256);
  ModelConfig t = flavor_config("debug-tiny");
  EXPECT_LE(t.vocab_size, 1024);
  EXPECT_NE(t.head_dim, t.hidden_size / t.num_attention_heads);
  EXPECT_EQ(flavor_names().size(), 20u);  // 9 dense (debug-chat too) + 3 qwen3_moe + 6 + 2 qwen3_5
  EXPECT_ONE_LINE_HAS(test::error_of([] { flavor_config("4b"); }),
                      "unknown model flavor \"4b\" (did you mean \"4B\"?)");
}

// The text_config of each published Qwen3.5 config.json (Qwen/Qwen3.5-*; torchtitan's
// models/qwen3_5/flavors.py has the same shapes). Common to all: head_dim 256, linear head dims
// 128, conv kernel 4, partial_rotary_factor 0.25, rope_theta 1e7, vocab 248320,
// full_attention_interval 4, max_position_embeddings 262144.
struct Qwen35Published {
  const char* name;
  int64_t hidden, inter, layers, heads, kv_heads, lin_k_heads, lin_v_heads;
  bool tied;
  int64_t experts, top_k, moe_inter, shared_inter;
  double card_billions;  // the model card's "Number of Parameters" (whole checkpoint, rounded)
};
const Qwen35Published kQwen35Published[] = {
    {"0.8B", 1024, 3584, 24, 8, 2, 16, 16, true, 0, 0, 0, 0, 0.8},
    {"2B", 2048, 6144, 24, 8, 2, 16, 16, true, 0, 0, 0, 0, 2},
    {"4B", 2560, 9216, 32, 16, 4, 16, 32, true, 0, 0, 0, 0, 4},
    {"9B", 4096, 12288, 32, 16, 4, 16, 32, false, 0, 0, 0, 0, 9},
    {"27B", 5120, 17408, 64, 24, 4, 16, 48, false, 0, 0, 0, 0, 27},
    {"35B-A3B", 2048, 0, 40, 16, 2, 16, 32, false, 256, 8, 512, 512, 35},
};

TEST(Flavors, Qwen35PublishedShapes) {
  for (const auto& p : kQwen35Published) {
    SCOPED_TRACE(p.name);
    const ModelConfig c = flavor_config(std::string("qwen3_5-") + p.name);
    EXPECT_EQ(c.model_type, p.experts ? "qwen3_5_moe" : "qwen3_5");
    EXPECT_EQ(c.vocab_size, 248320);
    EXPECT_EQ(c.hidden_size, p.hidden);
    if (!p.experts) {
      EXPECT_EQ(c.intermediate_size, p.inter);
    }
    EXPECT_EQ(c.num_hidden_layers, p.layers);
    EXPECT_EQ(c.num_attention_heads, p.heads);
    EXPECT_EQ(c.num_key_value_heads, p.kv_heads);
    EXPECT_EQ(c.head_dim, 256);
    EXPECT_EQ(c.rotary_dim(), 64);  // partial_rotary_factor 0.25
    EXPECT_EQ(c.rope_theta, 1e7);
    EXPECT_EQ(c.max_position_embeddings, 262144);
    EXPECT_EQ(c.linear_num_key_heads, p.lin_k_heads);
    EXPECT_EQ(c.linear_num_value_heads, p.lin_v_heads);
    EXPECT_EQ(c.linear_key_head_dim, 128);
    EXPECT_EQ(c.linear_value_head_dim, 128);
    EXPECT_EQ(c.linear_conv_kernel_dim, 4);
    EXPECT_EQ(c.tie_word_embeddings, p.tied);
    ASSERT_EQ(int64_t(c.layer_mixers.size()), p.layers);
    for (int64_t l = 0; l < p.layers; ++l)  // full_attention_interval 4
      EXPECT_EQ(c.layer_kind(l).mixer, (l + 1) % 4 == 0 ? MixerKind::GatedAttention : MixerKind::GatedDeltaNet) << l;
    EXPECT_EQ(c.num_experts, p.experts);
    if (p.experts) {
      EXPECT_EQ(c.num_experts_per_tok, p.top_k);
      EXPECT_EQ(c.moe_intermediate_size, p.moe_inter);
      EXPECT_EQ(c.shared_expert_intermediate_size, p.shared_inter);
      EXPECT_TRUE(c.norm_topk_prob);
      EXPECT_EQ(c.num_sparse_layers(), p.layers);
    }
    // With [model] name = "qwen3_5" the bare size names the same flavor.
    const ModelConfig bare = flavor_config(p.name, "qwen3_5");
    EXPECT_EQ(bare.flavor, c.flavor);
    EXPECT_EQ(model_param_count(bare), model_param_count(c));
  }
  // Every other family keeps the names it had: "4B" is Qwen3-4B, "30B-A3B" Qwen3-30B-A3B.
  EXPECT_EQ(flavor_config("4B").model_type, "qwen3");
  EXPECT_EQ(flavor_config("4B", "qwen3").model_type, "qwen3");
  EXPECT_EQ(flavor_config("30B-A3B", "qwen3_5").model_type, "qwen3_moe");  // not a qwen3_5 size: as given
  EXPECT_EQ(flavor_config("debug-qwen3_5", "qwen3_5").flavor, "debug-qwen3_5");
  EXPECT_EQ(flavor_config("qwen3_5-4B", "qwen3_5").flavor, "qwen3_5-4B");
  EXPECT_ONE_LINE_HAS(test::error_of([] { flavor_config("5B", "qwen3_5"); }), "unknown model flavor \"5B\"");
}

// Parameter counts: equal to a hand count from the config values (each module's shapes as
// transformers' Qwen3_5ForCausalLM builds them), and near the model card's figure. The card counts
// the whole checkpoint (the vision tower too: about 0.1B at 0.8B, 0.3-0.45B from 2B up) and rounds,
// so the text model lies within 7% of it; 35B-A3B: 35B total within 2%, and "A3B" active in [3, 3.5]B.
TEST(Flavors, Qwen35ParameterCountsMatchPublishedSizes) {
  for (const auto& p : kQwen35Published) {
    SCOPED_TRACE(p.name);
    const ModelConfig c = flavor_config(std::string("qwen3_5-") + p.name);
    const int64_t H = p.hidden, V = 248320, hd = 256, Kd = p.lin_k_heads * 128, Vd = p.lin_v_heads * 128;
    const int64_t attention = H * 2 * p.heads * hd          // q_proj: query and output gate
                              + 2 * H * p.kv_heads * hd     // k_proj, v_proj
                              + p.heads * hd * H + 2 * hd;  // o_proj, q_norm, k_norm
    const int64_t deltanet = H * (2 * Kd + Vd) + H * Vd + 2 * H * p.lin_v_heads  // in_proj_qkv, _z, _b, _a
                             + (2 * Kd + Vd) * 4                                 // conv1d (no bias)
                             + 2 * p.lin_v_heads + 128                           // dt_bias, A_log, norm
                             + Vd * H;                                           // out_proj
    const int64_t mlp = p.experts ? p.experts * H + p.experts * 3 * H * p.moe_inter + 3 * H * p.shared_inter + H
                                  : 3 * H * p.inter;
    const int64_t full = p.layers / 4;
    const int64_t hand = V * H * (p.tied ? 1 : 2) + H + p.layers * (2 * H + mlp) + full * attention +
                         (p.layers - full) * deltanet;
    EXPECT_EQ(model_param_count(c), hand);
    const double billions = double(model_param_count(c)) / 1e9;
    if (!p.experts) {
      EXPECT_NEAR(billions / p.card_billions, 1.0, 0.07) << billions << "B";
    } else {
      EXPECT_NEAR(billions / p.card_billions, 1.0, 0.02) << billions << "B";
      const double active = double(model_size(c, 4096).active_params) / 1e9;
      EXPECT_GE(active, 3.0);
      EXPECT_LE(active, 3.5);
      EXPECT_EQ(model_size(c, 4096).active_params, hand - p.layers * (p.experts - p.top_k) * 3 * H * p.moe_inter);
    }
  }
  // The counts themselves, pinned (text model, tied lm_head counted once).
  EXPECT_EQ(model_param_count(flavor_config("qwen3_5-0.8B")), 752393024);
  EXPECT_EQ(model_param_count(flavor_config("qwen3_5-2B")), 1881825088);
  EXPECT_EQ(model_param_count(flavor_config("qwen3_5-4B")), 4205751296);
  EXPECT_EQ(model_param_count(flavor_config("qwen3_5-9B")), 8953803264);
  EXPECT_EQ(model_param_count(flavor_config("qwen3_5-27B")), 26895998464);
  EXPECT_EQ(model_param_count(flavor_config("qwen3_5-35B-A3B")), 34660610688);
}

// The published config.json files (Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditionalGeneration
// with the text model in text_config; the text-relevant fields of Qwen/Qwen3.5-27B and
// Qwen/Qwen3.5-35B-A3B) parse to the flavors' shapes and parameter counts.
TEST(Flavors, Qwen35FlavorsEqualThePublishedConfigJson) {
  auto text = [](json t) {
    t["model_type"] = t.contains("num_experts") ? "qwen3_5_moe_text" : "qwen3_5_text";
    t["attn_output_gate"] = true;
    t["full_attention_interval"] = 4;
    t["head_dim"] = 256;
    t["hidden_act"] = "silu";
    t["linear_conv_kernel_dim"] = 4;
    t["linear_key_head_dim"] = 128;
    t["linear_value_head_dim"] = 128;
    t["linear_num_key_heads"] = 16;
    t["max_position_embeddings"] = 262144;
    t["mtp_num_hidden_layers"] = 1;
    t["rms_norm_eps"] = 1e-6;
    t["vocab_size"] = 248320;
    t["rope_parameters"] = json::parse(R"({"mrope_interleaved": true, "mrope_section": [11, 11, 10],
        "partial_rotary_factor": 0.25, "rope_theta": 10000000, "rope_type": "default"})");
    json layer_types = json::array();
    for (int64_t l = 0; l < t["num_hidden_layers"].get<int64_t>(); ++l)
      layer_types.push_back((l + 1) % 4 ? "linear_attention" : "full_attention");
    t["layer_types"] = layer_types;
    return t;
  };
  json dense = {{"architectures", {"Qwen3_5ForConditionalGeneration"}}, {"model_type", "qwen3_5"},
                {"tie_word_embeddings", false},
                {"text_config", text({{"hidden_size", 5120}, {"intermediate_size", 17408}, {"num_hidden_layers", 64},
                                      {"num_attention_heads", 24}, {"num_key_value_heads", 4},
                                      {"linear_num_value_heads", 48}})}};
  json moe = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}}, {"model_type", "qwen3_5_moe"},
              {"tie_word_embeddings", false},
              {"text_config", text({{"hidden_size", 2048}, {"num_hidden_layers", 40}, {"num_attention_heads", 16},
                                    {"num_key_value_heads", 2}, {"linear_num_value_heads", 32}, {"num_experts", 256},
                                    {"num_experts_per_tok", 8}, {"moe_intermediate_size", 512},
                                    {"shared_expert_intermediate_size", 512}})}};
  for (const auto& [j, name] : {std::pair{dense, "qwen3_5-27B"}, std::pair{moe, "qwen3_5-35B-A3B"}}) {
    SCOPED_TRACE(name);
    const ModelConfig hf = parse(j), f = flavor_config(name);
    EXPECT_EQ(hf.model_type, f.model_type);
    EXPECT_EQ(hf.num_hidden_layers, f.num_hidden_layers);
    EXPECT_EQ(hf.layer_mixers, f.layer_mixers);
    EXPECT_EQ(hf.rotary_dim(), f.rotary_dim());
    EXPECT_EQ(hf.rope_theta, f.rope_theta);
    EXPECT_EQ(hf.linear_in_rows(), f.linear_in_rows());
    EXPECT_EQ(hf.tie_word_embeddings, f.tie_word_embeddings);
    EXPECT_EQ(hf.num_sparse_layers(), f.num_sparse_layers());
    EXPECT_EQ(hf.shared_expert_intermediate_size, f.shared_expert_intermediate_size);
    EXPECT_EQ(model_param_count(hf), model_param_count(f));
  }
}

TEST(Flavors, ParamSpecsInModuleOrderWithShapes) {
  ModelConfig c = flavor_config("debug-tiny");
  c.tie_word_embeddings = false;
  auto specs = model_param_specs(c);
  ASSERT_EQ(specs.size(), size_t(1 + 11 * c.num_hidden_layers + 2));
  EXPECT_EQ(specs[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(specs[0].shape, (Shape{c.vocab_size, c.hidden_size}));
  EXPECT_EQ(specs[1].name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(specs[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(specs[2].shape, (Shape{c.num_attention_heads * c.head_dim, c.hidden_size}));
  EXPECT_EQ(specs[3].shape, (Shape{c.num_key_value_heads * c.head_dim, c.hidden_size}));
  EXPECT_EQ(specs[5].name, "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(specs[5].shape, (Shape{c.hidden_size, c.num_attention_heads * c.head_dim}));
  EXPECT_EQ(specs[6].name, "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(specs[6].shape, (Shape{c.head_dim}));
  EXPECT_EQ(specs[11].name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(specs[11].shape, (Shape{c.hidden_size, c.intermediate_size}));
  EXPECT_EQ(specs[specs.size() - 2].name, "model.norm.weight");
  EXPECT_EQ(specs.back().name, "lm_head.weight");
  c.tie_word_embeddings = true;
  EXPECT_EQ(model_param_specs(c).back().name, "model.norm.weight");
}

TEST(HfConfig, ParsesQwen3_06B) {
  ModelConfig c = parse(qwen3_06b_json());
  ModelConfig f = flavor_config("0.6B");
  EXPECT_EQ(c.flavor, "");
  EXPECT_EQ(c.hidden_size, f.hidden_size);
  EXPECT_EQ(c.intermediate_size, f.intermediate_size);
  EXPECT_EQ(c.num_hidden_layers, f.num_hidden_layers);
  EXPECT_EQ(c.num_key_value_heads, f.num_key_value_heads);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, DType::BF16);
  EXPECT_EQ(c.eos_token_id, 151645);
  EXPECT_EQ(model_param_count(c), model_param_count(f));
}

TEST(HfConfig, ParsesTransformers5Layout) {
  // transformers 5 writes rope_parameters, "dtype", layer_types and null token ids.
  json j = qwen3_06b_json();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j.erase("torch_dtype");
  j["rope_parameters"] = {{"rope_theta", 5000000.0}, {"rope_type", "default"}};
  j["dtype"] = "float32";
  j["layer_types"] = json::array();
  for (int i = 0; i < 28; ++i) j["layer_types"].push_back("full_attention");
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = json::array({151645, 151643});
  j["sliding_window"] = 4096;  // ignored while use_sliding_window is false
  ModelConfig c = parse(j);
  EXPECT_EQ(c.rope_theta, 5e6);
  EXPECT_EQ(c.torch_dtype, DType::F32);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.eos_token_id, 151645);
}

TEST(HfConfig, DefaultsFollowTransformersQwen3Config) {
  json j = qwen3_06b_json();
  for (const char* k : {"head_dim", "rope_theta", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings"})
    j.erase(k);
  ModelConfig c = parse(j);
  EXPECT_EQ(c.head_dim, 128);  // Qwen3Config.head_dim default, not hidden/heads (64)
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_FALSE(c.tie_word_embeddings);
  j["num_key_value_heads"] = nullptr;  // explicit null: as many kv heads as heads
  EXPECT_EQ(parse(j).num_key_value_heads, 16);
}

// A SmolLM2-135M-like Llama config (transformers 4.x spelling) and a Qwen2 one.
json llama_json() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 576,
    "initializer_range": 0.041666666666666664, "intermediate_size": 1536, "max_position_embeddings": 8192,
    "mlp_bias": false, "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30,
    "num_key_value_heads": 3, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
    "rope_theta": 100000, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "vocab_size": 49152})");
}

TEST(HfConfig, LlamaAndQwen2Families) {
  ModelConfig c = parse(llama_json());
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.head_dim, 64);  // absent: hidden / heads
  EXPECT_FALSE(c.has_qk_norm());
  EXPECT_FALSE(c.has_qkv_bias());
  EXPECT_EQ(model_param_count(c), 134515008);  // SmolLM2-135M
  json j = llama_json();
  j.erase("num_key_value_heads");  // LlamaConfig: absent -> num_attention_heads
  EXPECT_EQ(parse(j).num_key_value_heads, 9);
  j = llama_json();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  c = parse(j);
  EXPECT_EQ(c.rope_scaling.rope_type, "llama3");
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  ModelConfig back = parse_hf_config(hf_config_json(c, DType::F32), "export");
  EXPECT_EQ(back.rope_scaling.factor, 8.0);
  EXPECT_EQ(back.model_type, "llama");
  EXPECT_EQ(back.head_dim, 64);

  json q = llama_json();
  q["model_type"] = "qwen2";
  q["architectures"] = json::array({"Qwen2ForCausalLM"});
  q.erase("attention_bias");
  q.erase("mlp_bias");
  c = parse(q);
  EXPECT_TRUE(c.has_qkv_bias());
  EXPECT_FALSE(c.has_qk_norm());
  const auto specs = model_param_specs(c);
  EXPECT_EQ(specs[3].name, "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(specs[3].shape, (Shape{576}));

  struct Case {
    const char* key;
    json value;
    const char* message;
  };
  const Case cases[] = {
      {"attention_bias", true, "attention_bias is true; biased attention projections are not supported for llama"},
      {"mlp_bias", true, "mlp_bias is true"},
      {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}, "needs factor, low_freq_factor, high_freq_factor"},
      {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}, {"beta_fast", 2}}, "rope_scaling.beta_fast\" is not supported"},
      {"partial_rotary_factor", 0.5, "partial_rotary_factor 0.5 is not supported"},
      {"hidden_size", 577, "hidden_size (577) is not a multiple of num_attention_heads (9) and head_dim is absent"},
  };
  for (const auto& k : cases) {
    json x = llama_json();
    x[k.key] = k.value;
    const std::string e = parse_error(x);
    EXPECT_NE(e.find(k.message), std::string::npos) << k.key << ": " << e;
  }
}

TEST(HfConfig, RefusedFieldsEachNameTheProblem) {
  struct Case {
    const char* key;
    json value;
    const char* message;
  };
  const Case cases[] = {
      {"model_type", "mixtral", "model_type \"mixtral\" is not supported"},
      {"model_type", "gemma", "model_type \"gemma\" is not supported"},
      {"model_type", "llama", "architectures [\"Qwen3ForCausalLM\"] has no \"LlamaForCausalLM\""},
      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}, "rope_scaling of type \"yarn\" is not supported"},
      {"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}, "rope_scaling of type \"linear\" is not supported"},
      {"rope_scaling", {{"type", "dynamic"}, {"factor", 2.0}}, "rope_scaling of type \"dynamic\" is not supported"},
      {"rope_parameters", {{"rope_type", "yarn"}, {"rope_theta", 1e6}}, "rope_parameters of type \"yarn\" is not supported"},
      {"rope_parameters", {{"rope_type", "default"}, {"factor", 2.0}}, "field \"rope_parameters.factor\" is not supported"},
      {"rope_parameters", {{"rope_theta", 5.0}}, "rope_theta (1e+06) and rope_parameters.rope_theta (5) disagree"},
      {"use_sliding_window", true, "use_sliding_window is true; sliding-window attention is not supported"},
      {"layer_types", json::array({"sliding_attention"}), "layer_types has 1 entries but num_hidden_layers is 28"},
      {"attention_bias", true, "attention_bias is true"},
      {"hidden_act", "gelu", "hidden_act \"gelu\" is not supported"},
      {"attention_dropout", 0.1, "attention_dropout 0.1 is not supported"},
      {"quantization_config", {{"bits", 4}}, "quantization_config"},
      {"architectures", json::array({"Qwen3ForSequenceClassification"}), "has no \"Qwen3ForCausalLM\""},
      {"hidden_size", "1024", "field \"hidden_size\" must be an integer, got \"1024\""},
      {"hidden_size", 1024.5, "field \"hidden_size\" must be an integer, got 1024.5"},
      {"hidden_size", -4, "field \"hidden_size\" must be a positive integer, got -4"},
      {"num_hidden_layers", 0, "field \"num_hidden_layers\" must be a positive integer, got 0"},
      {"num_key_value_heads", 5, "num_attention_heads (16) must be a multiple of num_key_value_heads (5)"},
      {"num_key_value_heads", 32, "num_attention_heads (16) must be a multiple of num_key_value_heads (32)"},
      {"head_dim", 127, "head_dim must be even"},
      {"rms_norm_eps", 0, "rms_norm_eps must be positive"},
      {"rms_norm_eps", "1e-6", "field \"rms_norm_eps\" must be a number"},
      {"tie_word_embeddings", 1, "field \"tie_word_embeddings\" must be true or false, got 1"},
      {"torch_dtype", "int8", "field \"torch_dtype\" \"int8\" is not supported"},
      {"vocab_size", 18446744073709551615ull, "field \"vocab_size\" must be an integer in range"},
      {"hidden_size", int64_t(1) << 40, "hidden_size must be in [1, 1048576]"},
  };
  for (const auto& c : cases) {
    json j = qwen3_06b_json();
    j[c.key] = c.value;
    std::string m = parse_error(j);
    EXPECT_ONE_LINE_HAS(m, c.message);
    EXPECT_EQ(m.rfind("cfg/config.json: ", 0), 0u) << m;
  }
  json j = qwen3_06b_json();
  j["layer_types"] = json::array();
  for (int i = 0; i < 28; ++i) j["layer_types"].push_back(i == 27 ? "sliding_attention" : "full_attention");
  EXPECT_ONE_LINE_HAS(parse_error(j), "layer_types[27] is \"sliding_attention\"; only \"full_attention\" is supported");
}

TEST(HfConfig, MissingRequiredFieldsAndBadDocuments) {
  for (const char* k : {"model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                        "num_attention_heads", "num_key_value_heads"}) {
    json j = qwen3_06b_json();
    j.erase(k);
    EXPECT_ONE_LINE_HAS(parse_error(j), std::string("cfg/config.json: missing required field \"") + k + "\"");
  }
  EXPECT_ONE_LINE_HAS(parse_error_text("[1, 2]"), "cfg/config.json: config.json must be a JSON object, got array");
  EXPECT_ONE_LINE_HAS(parse_error_text("{\"model_type\": "), "cfg/config.json: invalid JSON");
  EXPECT_ONE_LINE_HAS(parse_error_text(""), "cfg/config.json: invalid JSON");
  std::string dup = qwen3_06b_json().dump();
  dup.insert(1, "\"hidden_size\": 2048, ");
  EXPECT_ONE_LINE_HAS(parse_error_text(dup), "cfg/config.json: duplicate key \"hidden_size\"");
  EXPECT_ONE_LINE_HAS(parse_error_text("{\"a\": \"\x01\x02\"}"), "invalid JSON");  // control bytes stay escaped
  EXPECT_ONE_LINE_HAS(test::error_of([] { load_hf_config("/nonexistent/config.json"); }),
                      "/nonexistent/config.json: cannot open");
}

TEST(HfConfig, ExportRoundTripsAndIsHfShaped) {
  for (const char* f : {"0.6B", "8B", "debug-tiny"}) {
    ModelConfig c = flavor_config(f);
    std::string text = hf_config_json(c, DType::F16);
    json j = json::parse(text);
    EXPECT_EQ(j["architectures"], json::array({"Qwen3ForCausalLM"}));
    EXPECT_EQ(j["model_type"], "qwen3");
    EXPECT_EQ(j["torch_dtype"], "float16");
    EXPECT_EQ(j["rope_scaling"], nullptr);
    EXPECT_EQ(j["use_sliding_window"], false);
    ModelConfig back = parse_hf_config(text, "export");
    EXPECT_EQ(back.torch_dtype, DType::F16);
    EXPECT_EQ(back.vocab_size, c.vocab_size);
    EXPECT_EQ(back.hidden_size, c.hidden_size);
    EXPECT_EQ(back.intermediate_size, c.intermediate_size);
    EXPECT_EQ(back.num_hidden_layers, c.num_hidden_layers);
    EXPECT_EQ(back.num_attention_heads, c.num_attention_heads);
    EXPECT_EQ(back.num_key_value_heads, c.num_key_value_heads);
    EXPECT_EQ(back.head_dim, c.head_dim);
    EXPECT_EQ(back.max_position_embeddings, c.max_position_embeddings);
    EXPECT_EQ(back.rope_theta, c.rope_theta);
    EXPECT_EQ(back.rms_norm_eps, c.rms_norm_eps);
    EXPECT_EQ(back.tie_word_embeddings, c.tie_word_embeddings);
    EXPECT_EQ(back.bos_token_id, c.bos_token_id);
    EXPECT_EQ(back.eos_token_id, c.eos_token_id);
  }
  ModelConfig c = flavor_config("debug-tiny");
  c.bos_token_id = -1;
  EXPECT_EQ(json::parse(hf_config_json(c, DType::BF16))["bos_token_id"], nullptr);
  EXPECT_THROW(hf_config_json(c, DType::I32), Error);
}

TEST(HfConfig, DeeplyNestedValueIsAnErrorNotACrash) {
  json j = qwen3_06b_json();
  std::string text = j.dump();
  text.insert(1, "\"deep\": " + std::string(200000, '[') + std::string(200000, ']') + ", ");
  EXPECT_EQ(parse_hf_config(text, "cfg/config.json").hidden_size, 1024);  // unknown keys are ignored
  text = "{\"rope_scaling\": " + std::string(200000, '[');
  EXPECT_ONE_LINE_HAS(parse_error_text(text), "cfg/config.json: invalid JSON");
}
