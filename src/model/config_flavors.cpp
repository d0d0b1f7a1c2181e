// The built-in flavors (model/config.h flavor_config): published Qwen3, Qwen3-MoE and Qwen3.5
// shapes, and the debug ones.
#include <string>
#include <vector>

#include "core/error.h"
#include "model/config.h"
#include "util/json_util.h"
#include "util/strings.h"

namespace titan {

namespace {

struct FlavorRow {
  const char* name;
  int64_t vocab, hidden, inter, layers, heads, kv_heads, head_dim, max_pos;
  bool tied;
};

// Published Qwen3 dense shapes (config.json of Qwen/Qwen3-*), head_dim 128 throughout; and two
// debug flavors: "debugmodel" keeps the real vocabulary (so the lm_head cost is realistic) and
// "debug-tiny" is small enough for unit tests. Both debug flavors have head_dim != hidden/heads.
// "debug-chat" keeps the real vocabulary at hidden 64, 4 layers (the SFT demonstration's model:
// the tied lm_head over 151936 tokens is nearly all of its cost, so the width is small and the
// depth, nearly free, does the arithmetic).
const FlavorRow kFlavors[] = {
    {"0.6B", 151936, 1024, 3072, 28, 16, 8, 128, 40960, true},
    {"1.7B", 151936, 2048, 6144, 28, 16, 8, 128, 40960, true},
    {"4B", 151936, 2560, 9728, 36, 32, 8, 128, 40960, true},
    {"8B", 151936, 4096, 12288, 36, 32, 8, 128, 40960, false},
    {"14B", 151936, 5120, 17408, 40, 40, 8, 128, 40960, false},
    {"32B", 151936, 5120, 25600, 64, 64, 8, 128, 40960, false},
    {"debugmodel", 151936, 256, 768, 4, 8, 4, 32, 2048, true},
    {"debug-tiny", 512, 64, 160, 2, 4, 2, 32, 256, true},
    {"debug-chat", 151936, 64, 256, 4, 4, 2, 16, 2048, true},
};

struct MoEFlavorRow {
  FlavorRow base;  // intermediate_size of the base is the dense MLP (used by mlp_only layers only)
  int64_t experts, top_k, moe_inter;
};

// Published Qwen3-MoE shapes (config.json of Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B: every
// layer sparse, norm_topk_prob true, untied, rope_theta 1e6), and "debug-moe": "debugmodel" with
// 8 experts of 128, top-2, in every layer (the real vocabulary, so it trains on the bundled data).
const MoEFlavorRow kMoEFlavors[] = {
    {{"30B-A3B", 151936, 2048, 6144, 48, 32, 4, 128, 40960, false}, 128, 8, 768},
    {{"235B-A22B", 151936, 4096, 12288, 94, 64, 4, 128, 40960, false}, 128, 8, 1536},
    {{"debug-moe", 151936, 256, 768, 4, 8, 4, 32, 2048, true}, 8, 2, 128},
};

// Qwen3.5 flavors (native, torchtitan's init). Published sizes: the text model (text_config of
// Qwen/Qwen3.5-*'s config.json; torchtitan's models/qwen3_5/flavors.py has the same shapes), every
// fourth layer gated attention (full_attention_interval 4), head_dim 256 with RoPE over a quarter
// of it (partial_rotary_factor 0.25, theta 1e7), linear heads of 128 with a conv kernel of 4, the
// 248320-token vocabulary, 262144 positions; 0.8B, 2B and 4B tie the lm_head to the embedding.
// The vision tower and the MTP layer of the published checkpoints are not part of the text model.
// Their names are "qwen3_5-<size>" (unique among all flavors, for `titan info --model`); with
// [model] name = "qwen3_5" the bare size ("4B") names them too (torchtitan keys flavors per model).
//
// Debug flavors: the Qwen3 tokenizer's vocabulary (so they train on the bundled data), three Gated
// DeltaNet layers to one gated attention layer, linear value heads twice the key heads, partial
// RoPE over a quarter of head_dim, tied embeddings. "debug-qwen3_5-moe" routes every layer over 8
// experts (top 2) plus a shared expert.
struct Qwen35FlavorRow {
  const char* name;
  int64_t vocab, hidden, inter, layers, heads, kv_heads, head_dim;
  int64_t lin_k_heads, lin_v_heads, lin_k_dim, lin_v_dim;
  int64_t max_pos;
  double rope_theta;
  bool tied;
  int64_t experts, top_k, moe_inter, shared_inter;  // experts 0: dense
};
constexpr const char* kQwen35Prefix = "qwen3_5-";
const Qwen35FlavorRow kQwen35Flavors[] = {
    {"qwen3_5-0.8B", 248320, 1024, 3584, 24, 8, 2, 256, 16, 16, 128, 128, 262144, 1e7, true, 0, 0, 0, 0},
    {"qwen3_5-2B", 248320, 2048, 6144, 24, 8, 2, 256, 16, 16, 128, 128, 262144, 1e7, true, 0, 0, 0, 0},
    {"qwen3_5-4B", 248320, 2560, 9216, 32, 16, 4, 256, 16, 32, 128, 128, 262144, 1e7, true, 0, 0, 0, 0},
    {"qwen3_5-9B", 248320, 4096, 12288, 32, 16, 4, 256, 16, 32, 128, 128, 262144, 1e7, false, 0, 0, 0, 0},
    {"qwen3_5-27B", 248320, 5120, 17408, 64, 24, 4, 256, 16, 48, 128, 128, 262144, 1e7, false, 0, 0, 0, 0},
    // MoE: intermediate_size is unused (every layer routed; config.json carries none).
    {"qwen3_5-35B-A3B", 248320, 2048, 512, 40, 16, 2, 256, 16, 32, 128, 128, 262144, 1e7, false, 256, 8, 512, 512},
    {"debug-qwen3_5", 151936, 256, 768, 4, 4, 2, 64, 4, 8, 32, 32, 2048, 1e7, true, 0, 0, 0, 0},
    {"debug-qwen3_5-moe", 151936, 256, 768, 4, 4, 2, 64, 4, 8, 32, 32, 2048, 1e7, true, 8, 2, 128, 256},
};

ModelConfig qwen3_5_flavor(const Qwen35FlavorRow& f) {
  ModelConfig c;
  c.flavor = f.name;
  c.model_type = f.experts > 0 ? "qwen3_5_moe" : "qwen3_5";
  c.vocab_size = f.vocab;
  c.hidden_size = f.hidden;
  c.intermediate_size = f.inter;
  c.num_hidden_layers = f.layers;
  c.num_attention_heads = f.heads;
  c.num_key_value_heads = f.kv_heads;
  c.head_dim = f.head_dim;
  c.max_position_embeddings = f.max_pos;
  c.rope_theta = f.rope_theta;
  c.partial_rotary_factor = 0.25;
  c.tie_word_embeddings = f.tied;
  c.linear_num_key_heads = f.lin_k_heads;
  c.linear_num_value_heads = f.lin_v_heads;
  c.linear_key_head_dim = f.lin_k_dim;
  c.linear_value_head_dim = f.lin_v_dim;
  c.linear_conv_kernel_dim = 4;
  for (int64_t i = 0; i < f.layers; ++i)  // full_attention_interval 4
    c.layer_mixers.push_back((i + 1) % 4 ? MixerKind::GatedDeltaNet : MixerKind::GatedAttention);
  if (f.experts > 0) {
    c.num_experts = f.experts;
    c.num_experts_per_tok = f.top_k;
    c.moe_intermediate_size = f.moe_inter;
    c.shared_expert_intermediate_size = f.shared_inter;
    c.norm_topk_prob = true;
  }
  return c;
}

}  // namespace

std::vector<std::string> flavor_names() {
  std::vector<std::string> names;
  for (const auto& f : kFlavors) names.push_back(f.name);
  for (const auto& f : kMoEFlavors) names.push_back(f.base.name);
  for (const auto& f : kQwen35Flavors) names.push_back(f.name);
  return names;
}

namespace {
ModelConfig base_config(const FlavorRow& f) {
  ModelConfig c;
  c.flavor = f.name;
  c.vocab_size = f.vocab;
  c.hidden_size = f.hidden;
  c.intermediate_size = f.inter;
  c.num_hidden_layers = f.layers;
  c.num_attention_heads = f.heads;
  c.num_key_value_heads = f.kv_heads;
  c.head_dim = f.head_dim;
  c.max_position_embeddings = f.max_pos;
  c.tie_word_embeddings = f.tied;
  return c;
}
}  // namespace

ModelConfig flavor_config(const std::string& name, const std::string& family) {
  if (family == "qwen3_5" && name.rfind(kQwen35Prefix, 0) != 0) {
    const std::string qualified = kQwen35Prefix + name;  // "4B" -> "qwen3_5-4B"
    for (const auto& f : kQwen35Flavors)
      if (qualified == f.name) return flavor_config(qualified);
  }
  for (const auto& f : kQwen35Flavors) {
    if (name != f.name) continue;
    ModelConfig c = qwen3_5_flavor(f);
    c.validate("flavor " + name);
    return c;
  }
  for (const auto& f : kMoEFlavors) {
    if (name != f.base.name) continue;
    ModelConfig c = base_config(f.base);
    c.model_type = "qwen3_moe";
    c.num_experts = f.experts;
    c.num_experts_per_tok = f.top_k;
    c.moe_intermediate_size = f.moe_inter;
    c.norm_topk_prob = true;
    c.validate("flavor " + name);
    return c;
  }
  for (const auto& f : kFlavors) {
    if (name != f.name) continue;
    ModelConfig c = base_config(f);
    c.validate("flavor " + name);
    return c;
  }
  std::string known;
  for (const auto& n : flavor_names()) known += (known.empty() ? "" : ", ") + n;
  std::string guess = closest_match(name, flavor_names());
  fail("unknown model flavor ", quote(name), guess.empty() ? "" : " (did you mean \"" + guess + "\"?)",
       "; known flavors: ", known);
}

}  // namespace titan
