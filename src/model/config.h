// Model configuration: from the built-in flavor table (torchtitan's role) or from a Hugging Face
// config.json (model_type "qwen3"; "qwen3_moe" comes with the MoE issue). Every field of
// config.json that changes the computation is either honoured or refused with a clear error.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace titan {

struct ModelConfig {
  std::string model_type = "qwen3";
  std::string flavor;  // flavor name when built from the table, "" from config.json
  int64_t vocab_size = 151936;
  int64_t hidden_size = 1024;
  int64_t intermediate_size = 3072;
  int64_t num_hidden_layers = 28;
  int64_t num_attention_heads = 16;
  int64_t num_key_value_heads = 8;
  int64_t head_dim = 128;  // explicit: not hidden_size / num_attention_heads for Qwen3
  int64_t max_position_embeddings = 40960;
  double rope_theta = 1000000.0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = true;
  DType torch_dtype = DType::BF16;  // dtype the checkpoint declares (export default)
  int64_t bos_token_id = 151643, eos_token_id = 151645;

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  void validate(const std::string& origin) const;  // shapes consistent; error names origin
};

// Built-in flavors: "0.6B", "1.7B", "4B", "8B", "14B", "32B" (published Qwen3 shapes) and debug
// flavors ("debugmodel", "debug-tiny"). Unknown name: error listing the known ones.
ModelConfig flavor_config(const std::string& name);
std::vector<std::string> flavor_names();

// Parse a Hugging Face config.json (path names the file in errors).
ModelConfig load_hf_config(const std::string& path);
// The config.json text for export (HF field names, architectures, torch_dtype).
std::string hf_config_json(const ModelConfig& c, DType export_dtype);

// One expected parameter: HF name and shape (dtype is f32 in memory; files may hold bf16/f16/f32).
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
};
// All parameters of Qwen3ForCausalLM in HF naming, in module order. A tied model has no
// lm_head.weight entry (it is model.embed_tokens.weight).
std::vector<ParamSpec> model_param_specs(const ModelConfig& c);

}  // namespace titan
