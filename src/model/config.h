// Model configuration: from the built-in flavor table (torchtitan's role) or from a Hugging Face
// config.json (model_type "qwen3", "qwen3_moe", "llama" or "qwen2"). Every field of config.json
// that changes the computation is either honoured or refused with a clear error.
//
// The families are one decoder: Llama is Qwen3 without the per-head q/k RMSNorm, and Qwen2 is
// Llama with biases on the q/k/v projections (has_qk_norm / has_qkv_bias below).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "model/layer_kind.h"
#include "model/param_spec.h"

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
  int64_t bos_token_id = 151643, eos_token_id = 151645;  // -1: null in config.json
  double initializer_range = 0.02;  // std of HF's normal init
  // RoPE frequency scaling (rope_scaling / rope_parameters of type "llama3"; rope_type "" = plain
  // RoPE). HF's _compute_llama3_parameters: wavelengths above original/low_freq_factor are divided
  // by factor, below original/high_freq_factor kept, and interpolated in between.
  struct RopeScaling {
    std::string rope_type;  // "" or "llama3"
    double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
    int64_t original_max_position_embeddings = 8192;
  } rope_scaling;

  // qwen3_moe only (transformers' Qwen3MoeConfig; ignored for "qwen3"). Layer i is sparse iff
  // num_experts > 0, i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0; dense
  // layers are a SwiGLU MLP of intermediate_size, sparse ones num_experts SwiGLU experts of
  // moe_intermediate_size with a top-num_experts_per_tok router.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  double router_aux_loss_coef = 0.001;
  bool output_router_logits = false;  // true: the loss includes router_aux_loss_coef * aux loss

  // Qwen3.5 (model/layers/gated_deltanet.cpp, gated_attention.cpp; docs/qwen3_5.md): "qwen3_5"
  // (dense) and "qwen3_5_moe" (every layer routed experts plus a shared expert with a sigmoid
  // gate). Each layer is a Gated DeltaNet (layer_types "linear_attention") or a gated attention
  // layer ("full_attention": q_proj gives the query and an output gate, RoPE on the first
  // partial_rotary_factor of head_dim); every RMSNorm but the delta-net's gated one is
  // zero-centred (x^ (1 + w), w initialised to 0).
  int64_t linear_num_key_heads = 0, linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0, linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 4;
  double partial_rotary_factor = 1.0;
  int64_t shared_expert_intermediate_size = 0;  // qwen3_5_moe
  // The config came as the text_config of Qwen3_5ForConditionalGeneration (a checkpoint that may
  // hold vision weights, skipped on load); export writes the text model (Qwen3_5ForCausalLM).
  bool from_multimodal = false;
  bool is_qwen3_5() const { return model_type == "qwen3_5" || model_type == "qwen3_5_moe"; }
  bool zero_centered_norm() const { return is_qwen3_5(); }
  bool has_shared_expert() const { return model_type == "qwen3_5_moe" && shared_expert_intermediate_size > 0; }
  int64_t rotary_dim() const;  // head_dim * partial_rotary_factor (even)
  int64_t linear_key_dim() const { return linear_num_key_heads * linear_key_head_dim; }
  int64_t linear_value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
  int64_t linear_conv_dim() const { return 2 * linear_key_dim() + linear_value_dim(); }
  // The fused in_proj rows of a delta-net layer: qkv (conv_dim), z (value_dim), b, a (value heads each).
  int64_t linear_in_rows() const { return linear_conv_dim() + linear_value_dim() + 2 * linear_num_value_heads; }

  bool is_moe() const { return model_type == "qwen3_moe" || model_type == "qwen3_5_moe"; }
  // Per-head RMSNorm of q and k after the projections (q_norm / k_norm weights): Qwen3 and Qwen3.5.
  bool has_qk_norm() const { return model_type == "qwen3" || model_type == "qwen3_moe" || is_qwen3_5(); }
  // Biases on q_proj / k_proj / v_proj (not o_proj): Qwen2 only.
  bool has_qkv_bias() const { return model_type == "qwen2"; }
  bool layer_is_sparse(int64_t layer) const;
  // Per layer, its mixer (HF layer_types; empty = every layer Attention) and, from the MoE rule
  // above, its MLP (model/layer_kind.h). layer_kind() is what the decoder dispatches on.
  std::vector<MixerKind> layer_mixers;
  LayerKind layer_kind(int64_t layer) const;
  int64_t num_sparse_layers() const;

  int64_t q_dim() const { return num_attention_heads * head_dim; }
  int64_t kv_dim() const { return num_key_value_heads * head_dim; }
  void validate(const std::string& origin) const;  // shapes consistent; error names origin
};

// Built-in flavors: "0.6B", "1.7B", "4B", "8B", "14B", "32B" (published Qwen3 shapes), "30B-A3B",
// "235B-A22B" (Qwen3-MoE), "qwen3_5-0.8B", "qwen3_5-2B", "qwen3_5-4B", "qwen3_5-9B", "qwen3_5-27B",
// "qwen3_5-35B-A3B" (Qwen3.5 text models) and debug flavors ("debugmodel", "debug-tiny",
// "debug-qwen3_5", ...). family "qwen3_5" ([model] name) also resolves a Qwen3.5 size without
// its prefix ("4B" -> "qwen3_5-4B"), as torchtitan keys flavors per model; any other family, or a
// name the family's table lacks, looks the name up as given. Unknown name: error listing the known ones.
ModelConfig flavor_config(const std::string& name, const std::string& family = "");
std::vector<std::string> flavor_names();

// Parse a Hugging Face config.json (path names the file in errors).
ModelConfig load_hf_config(const std::string& path);
// Same from text in memory (the fuzzing entry point); origin names the source in errors.
// Required: model_type "qwen3", "qwen3_moe", "llama" or "qwen2", vocab_size, hidden_size, intermediate_size, num_hidden_layers,
// num_attention_heads, num_key_value_heads. Absent optional fields take Qwen3Config's defaults in
// transformers (head_dim 128, rms_norm_eps 1e-6, rope_theta 10000, max_position_embeddings 32768,
// tie_word_embeddings false); llama and qwen2 take LlamaConfig's / Qwen2Config's (head_dim
// hidden_size / num_attention_heads, max_position_embeddings 2048 / 32768). Refused: rope_scaling /
// rope_parameters of a type other than "default" or "llama3", partial_rotary_factor != 1,
// use_sliding_window true, mlp_bias true, layer_types other than "full_attention", attention_bias
// true (llama, qwen3: qwen2's q/k/v biases are always on), hidden_act other than "silu", attention_dropout != 0, quantization_config.
// qwen3_moe: intermediate_size, num_experts, num_experts_per_tok, moe_intermediate_size,
// norm_topk_prob, decoder_sparse_step, mlp_only_layers, router_aux_loss_coef and
// output_router_logits take Qwen3MoeConfig's defaults (6144, 128, 8, 768, false, 1, [], 0.001,
// false); the same field names in transformers 4.x and 5.x.
ModelConfig parse_hf_config(std::string_view text, const std::string& origin);
// The config.json text for export (HF field names, architectures, torch_dtype).
std::string hf_config_json(const ModelConfig& c, DType export_dtype);

}  // namespace titan
