// ModelConfig's rules (validate, layer kinds) and config.json: parse_hf_config (Qwen3, Qwen3-MoE,
// Llama, Qwen2, Qwen3.5 and their text configs) and hf_config_json (what an HF export writes). The
// built-in flavors are config_flavors.cpp.
#include "model/config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/tensor.h"
#include "util/json_util.h"
#include "util/strings.h"

namespace titan {

using nlohmann::json;

namespace {

const char* hf_dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::BF16: return "bfloat16";
    case DType::F16: return "float16";
    default: return nullptr;
  }
}

// Field access with type checks; every error names the file and the field.
class Fields {
 public:
  Fields(const json& j, const std::string& origin) : j_(j), origin_(origin) {}

  const json* find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }
  bool present(const char* key) const {  // present and not null
    const json* v = find(key);
    return v && !v->is_null();
  }
  [[noreturn]] void bad(const char* key, const char* expected, const json& v) const {
    fail(origin_, ": field \"", key, "\" must be ", expected, ", got ", printable(v.dump(), 60));
  }
  int64_t integer(const char* key, bool required, int64_t def) const {
    const json* v = find(key);
    if (!v) {
      TITAN_CHECK(!required, origin_, ": missing required field \"", key, "\"");
      return def;
    }
    if (v->is_number_unsigned()) {
      if (v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) bad(key, "an integer in range", *v);
      return int64_t(v->get<uint64_t>());
    }
    if (!v->is_number_integer()) bad(key, "an integer", *v);
    return v->get<int64_t>();
  }
  int64_t positive(const char* key, bool required, int64_t def) const {
    int64_t x = integer(key, required, def);
    if (x <= 0) bad(key, "a positive integer", *find(key));
    return x;
  }
  double number(const char* key, double def) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_number()) bad(key, "a number", *v);
    double x = v->get<double>();
    if (!std::isfinite(x)) bad(key, "a finite number", *v);
    return x;
  }
  bool boolean(const char* key, bool def) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_boolean()) bad(key, "true or false", *v);
    return v->get<bool>();
  }
  std::string string(const char* key, bool required, const std::string& def) const {
    const json* v = find(key);
    if (!v) {
      TITAN_CHECK(!required, origin_, ": missing required field \"", key, "\"");
      return def;
    }
    if (!v->is_string()) bad(key, "a string", *v);
    return v->get<std::string>();
  }
  // Token ids: an integer, null (-> -1) or a list of integers (-> the first; they do not affect
  // the computation, only generation).
  int64_t token_id(const char* key, int64_t def) const {
    const json* v = find(key);
    if (!v) return def;
    if (v->is_null()) return -1;
    const json* x = v;
    if (v->is_array()) {
      if (v->empty()) return -1;
      x = &(*v)[0];
      for (const auto& e : *v)
        if (!e.is_number_integer()) bad(key, "an integer, null or a list of integers", *v);
    }
    if (!x->is_number_integer() || x->get<int64_t>() < 0) bad(key, "a non-negative integer, null or a list of them", *v);
    return x->get<int64_t>();
  }

 private:
  const json& j_;
  const std::string& origin_;
};

// rope_scaling (transformers 4.x) / rope_parameters (5.x): plain RoPE ("default") or Llama 3's
// frequency scaling ("llama3", into *scaling). Returns rope_theta when the object carries one, else NaN.
// partial (Qwen3.5, else null: refused): receives partial_rotary_factor; mrope_section and
// mrope_interleaved are accepted there (text positions: the three sections get the same position,
// so the multimodal layout reduces to plain RoPE).
double check_rope_object(const json& v, const char* key, const std::string& origin, ModelConfig::RopeScaling* scaling,
                         double* partial = nullptr) {
  if (v.is_null()) return NAN;
  TITAN_CHECK(v.is_object(), origin, ": field \"", key, "\" must be an object or null, got ", printable(v.dump(), 60));
  double theta = NAN;
  std::string type = "default";
  for (const char* tk : {"rope_type", "type"}) {  // the type first: it names what is unsupported
    auto it = v.find(tk);
    if (it == v.end()) continue;
    TITAN_CHECK(it->is_string(), origin, ": field \"", key, ".", tk, "\" must be a string");
    const std::string& t = it->get_ref<const std::string&>();
    TITAN_CHECK(t == "default" || t == "llama3", origin, ": ", key, " of type ", quote(t),
                " is not supported (only plain RoPE, null or \"default\", and \"llama3\")");
    type = t;
  }
  const bool llama3 = type == "llama3";
  ModelConfig::RopeScaling rs;
  rs.rope_type = llama3 ? "llama3" : "";
  bool have_factor = false, have_low = false, have_high = false, have_orig = false;
  auto num = [&](const std::string& k, const json& x) {
    TITAN_CHECK(x.is_number() && std::isfinite(x.get<double>()), origin, ": field \"", key, ".", k, "\" must be a number");
    return x.get<double>();
  };
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& k = it.key();
    if (k == "rope_theta") {
      theta = num(k, *it);
    } else if (k == "rope_type" || k == "type") {
    } else if (k == "partial_rotary_factor" && partial) {
      *partial = num(k, *it);
    } else if (partial && (k == "mrope_section" || k == "mrope_interleaved")) {
    } else if (k == "partial_rotary_factor") {
      TITAN_CHECK(num(k, *it) == 1.0, origin, ": field \"", key, ".partial_rotary_factor\" ", it->dump(),
                  " is not supported (only 1: RoPE over the whole head)");
    } else if (llama3 && k == "factor") {
      rs.factor = num(k, *it), have_factor = true;
    } else if (llama3 && k == "low_freq_factor") {
      rs.low_freq_factor = num(k, *it), have_low = true;
    } else if (llama3 && k == "high_freq_factor") {
      rs.high_freq_factor = num(k, *it), have_high = true;
    } else if (llama3 && k == "original_max_position_embeddings") {
      TITAN_CHECK(it->is_number_integer() && it->get<int64_t>() > 0, origin, ": field \"", key,
                  ".original_max_position_embeddings\" must be a positive integer");
      rs.original_max_position_embeddings = it->get<int64_t>(), have_orig = true;
    } else {
      fail(origin, ": field \"", key, ".", printable(k), "\" is not supported (", llama3 ? "llama3 RoPE: rope_theta, factor, "
           "low_freq_factor, high_freq_factor, original_max_position_embeddings" : "plain RoPE: rope_type \"default\" and rope_theta", ")");
    }
  }
  if (llama3) {
    TITAN_CHECK(have_factor && have_low && have_high && have_orig, origin, ": ", key,
                " of type \"llama3\" needs factor, low_freq_factor, high_freq_factor and original_max_position_embeddings");
    TITAN_CHECK(rs.factor > 0 && rs.low_freq_factor > 0 && rs.high_freq_factor > rs.low_freq_factor, origin, ": ", key,
                ": llama3 scaling needs factor > 0 and high_freq_factor > low_freq_factor > 0");
  }
  *scaling = rs;
  return theta;
}

// The families this engine runs: model_type -> the CausalLM architecture name.
const char* architecture_of(const std::string& model_type) {
  if (model_type == "qwen3") return "Qwen3ForCausalLM";
  if (model_type == "qwen3_moe") return "Qwen3MoeForCausalLM";
  if (model_type == "llama") return "LlamaForCausalLM";
  if (model_type == "qwen2") return "Qwen2ForCausalLM";
  if (model_type == "qwen3_5") return "Qwen3_5ForCausalLM";
  if (model_type == "qwen3_5_moe") return "Qwen3_5MoeForCausalLM";
  return nullptr;
}
constexpr const char* kKnownTypes =
    "\"qwen3\", \"qwen3_moe\", \"llama\", \"qwen2\", \"qwen3_5\" or \"qwen3_5_moe\" (or their \"_text\" configs)";

}  // namespace

bool ModelConfig::layer_is_sparse(int64_t layer) const {
  if (!is_moe() || num_experts <= 0) return false;
  for (int64_t l : mlp_only_layers)
    if (l == layer) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

LayerKind ModelConfig::layer_kind(int64_t layer) const {
  LayerKind k;
  if (!layer_mixers.empty()) k.mixer = layer_mixers.at(size_t(layer));
  k.mlp = layer_is_sparse(layer) ? MlpKind::MoE : MlpKind::Dense;
  return k;
}

int64_t ModelConfig::rotary_dim() const {
  const int64_t d = int64_t(double(head_dim) * partial_rotary_factor);  // transformers: int(head_dim * factor)
  return d;
}

int64_t ModelConfig::num_sparse_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_hidden_layers; ++l) n += layer_is_sparse(l);
  return n;
}

void ModelConfig::validate(const std::string& origin) const {
  TITAN_CHECK(architecture_of(model_type), origin, ": model_type ", quote(model_type), " is not supported (expected ",
              kKnownTypes, ")");
  TITAN_CHECK(rope_scaling.rope_type.empty() || rope_scaling.rope_type == "llama3", origin, ": rope scaling type ",
              quote(rope_scaling.rope_type), " is not supported");
  struct Limit {
    const char* name;
    int64_t value, max;
  };
  // Bounds keep every derived size (param counts, q_dim * hidden) far from int64 overflow.
  const Limit limits[] = {{"vocab_size", vocab_size, int64_t(1) << 31},
                          {"hidden_size", hidden_size, int64_t(1) << 20},
                          {"intermediate_size", intermediate_size, int64_t(1) << 22},
                          {"num_hidden_layers", num_hidden_layers, 4096},
                          {"num_attention_heads", num_attention_heads, 4096},
                          {"num_key_value_heads", num_key_value_heads, 4096},
                          {"head_dim", head_dim, 4096},
                          {"max_position_embeddings", max_position_embeddings, int64_t(1) << 31}};
  for (const auto& l : limits)
    TITAN_CHECK(l.value > 0 && l.value <= l.max, origin, ": ", l.name, " must be in [1, ", l.max, "], got ", l.value);
  TITAN_CHECK(num_attention_heads % num_key_value_heads == 0, origin, ": num_attention_heads (", num_attention_heads,
              ") must be a multiple of num_key_value_heads (", num_key_value_heads, ")");
  TITAN_CHECK(head_dim % 2 == 0, origin, ": head_dim must be even for the half-split RoPE, got ", head_dim);
  TITAN_CHECK(std::isfinite(rope_theta) && rope_theta > 0, origin, ": rope_theta must be positive, got ", rope_theta);
  TITAN_CHECK(std::isfinite(rms_norm_eps) && rms_norm_eps > 0, origin, ": rms_norm_eps must be positive, got ", rms_norm_eps);
  TITAN_CHECK(std::isfinite(initializer_range) && initializer_range >= 0, origin,
              ": initializer_range must be non-negative, got ", initializer_range);
  TITAN_CHECK(hf_dtype_name(torch_dtype) != nullptr, origin, ": torch_dtype must be a floating type, got ",
              dtype_name(torch_dtype));
  if (is_qwen3_5()) {
    const Limit lin[] = {{"linear_num_key_heads", linear_num_key_heads, 4096},
                         {"linear_num_value_heads", linear_num_value_heads, 4096},
                         {"linear_key_head_dim", linear_key_head_dim, 4096},
                         {"linear_value_head_dim", linear_value_head_dim, 4096},
                         {"linear_conv_kernel_dim", linear_conv_kernel_dim, 64}};
    for (const auto& l : lin)
      TITAN_CHECK(l.value > 0 && l.value <= l.max, origin, ": ", l.name, " must be in [1, ", l.max, "], got ", l.value);
    TITAN_CHECK(linear_num_value_heads % linear_num_key_heads == 0, origin, ": linear_num_value_heads (",
                linear_num_value_heads, ") must be a multiple of linear_num_key_heads (", linear_num_key_heads, ")");
    TITAN_CHECK(partial_rotary_factor > 0 && partial_rotary_factor <= 1 && rotary_dim() >= 2 && rotary_dim() % 2 == 0,
                origin, ": partial_rotary_factor ", partial_rotary_factor, " must give an even rotary dim in [2, head_dim]",
                " (got ", rotary_dim(), " of ", head_dim, ")");
    TITAN_CHECK(int64_t(layer_mixers.size()) == num_hidden_layers, origin, ": qwen3.5 needs a mixer per layer (",
                layer_mixers.size(), " for ", num_hidden_layers, " layers)");
    for (MixerKind m : layer_mixers)
      TITAN_CHECK(m != MixerKind::Attention, origin, ": qwen3.5 layers are gated_attention or gated_deltanet");
    if (model_type == "qwen3_5_moe")
      TITAN_CHECK(shared_expert_intermediate_size >= 0 && shared_expert_intermediate_size <= (int64_t(1) << 22), origin,
                  ": shared_expert_intermediate_size must be in [0, ", int64_t(1) << 22, "], got ",
                  shared_expert_intermediate_size);
  } else {
    for (MixerKind m : layer_mixers)
      TITAN_CHECK(m == MixerKind::Attention, origin, ": ", model_type, " layers are softmax attention only");
  }
  if (!is_moe()) return;
  TITAN_CHECK(num_experts >= 0 && num_experts <= 65536, origin, ": num_experts must be in [0, 65536], got ", num_experts);
  TITAN_CHECK(decoder_sparse_step >= 1 && decoder_sparse_step <= 4096, origin,
              ": decoder_sparse_step must be in [1, 4096], got ", decoder_sparse_step);
  TITAN_CHECK(std::isfinite(router_aux_loss_coef), origin, ": router_aux_loss_coef must be finite");
  for (int64_t l : mlp_only_layers)
    TITAN_CHECK(l >= 0, origin, ": mlp_only_layers entry ", l, " is negative");  // indices past the last layer: no effect, as in HF
  if (num_sparse_layers() == 0) return;
  TITAN_CHECK(num_experts_per_tok >= 1 && num_experts_per_tok <= num_experts, origin,
              ": num_experts_per_tok must be in [1, num_experts = ", num_experts, "], got ", num_experts_per_tok);
  TITAN_CHECK(moe_intermediate_size >= 1 && moe_intermediate_size <= (int64_t(1) << 22), origin,
              ": moe_intermediate_size must be in [1, ", int64_t(1) << 22, "], got ", moe_intermediate_size);
}

namespace {

// Qwen3_5ForConditionalGeneration / Qwen3_5MoeForConditionalGeneration: the text model is
// text_config (the vision tower's config is not read; its weights are skipped on load). The top
// level's tie_word_embeddings is the one transformers ties by.
bool unwrap_text_config(json& j, const std::string& origin) {
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string()) return false;
  const std::string t = mt->get<std::string>();
  if ((t != "qwen3_5" && t != "qwen3_5_moe") || !j.contains("text_config")) return false;
  const std::string arch = t == "qwen3_5" ? "Qwen3_5ForConditionalGeneration" : "Qwen3_5MoeForConditionalGeneration";
  if (const auto a = j.find("architectures"); a != j.end() && !a->is_null()) {
    TITAN_CHECK(a->is_array(), origin, ": field \"architectures\" must be a list");
    bool ok = a->empty();
    for (const auto& e : *a)
      ok |= e.is_string() && (e.get<std::string>() == arch || e.get<std::string>() == architecture_of(t));
    TITAN_CHECK(ok, origin, ": architectures ", printable(a->dump(), 80), " has no \"", arch, "\"");
  }
  json text = j["text_config"];
  TITAN_CHECK(text.is_object(), origin, ": field \"text_config\" must be an object");
  if (j.contains("tie_word_embeddings")) text["tie_word_embeddings"] = j["tie_word_embeddings"];
  else if (!text.contains("tie_word_embeddings")) text["tie_word_embeddings"] = false;
  for (const char* k : {"torch_dtype", "dtype"})
    if (j.contains(k) && !text.contains(k)) text[k] = j[k];
  if (!text.contains("model_type")) text["model_type"] = t + "_text";
  text.erase("architectures");
  j = std::move(text);
  return true;
}

// The keys a Qwen3.5 text config may carry; any other is refused by name (it may change the
// computation in a way this engine does not know).
bool qwen3_5_key_known(const std::string& k, bool moe) {
  static const char* const kKeys[] = {
      "model_type", "architectures", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
      "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings",
      "initializer_range", "rms_norm_eps", "use_cache", "tie_word_embeddings", "rope_parameters", "rope_scaling",
      "rope_theta", "partial_rotary_factor", "attention_bias", "attention_dropout", "linear_conv_kernel_dim",
      "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads",
      "layer_types", "full_attention_interval", "pad_token_id", "bos_token_id", "eos_token_id", "torch_dtype", "dtype",
      "transformers_version", "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings", "attn_output_gate",
      "output_attentions", "output_hidden_states", "return_dict", "chunk_size_feed_forward", "is_encoder_decoder",
      "id2label", "label2id", "problem_type", "tokenizer_class", "use_return_dict", "quantization_config"};
  static const char* const kMoe[] = {"moe_intermediate_size", "shared_expert_intermediate_size", "num_experts_per_tok",
                                     "num_experts", "num_local_experts", "output_router_logits", "router_aux_loss_coef",
                                     "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers"};
  if (!k.empty() && k[0] == '_') return true;  // _name_or_path, _attn_implementation, ...
  for (const char* x : kKeys)
    if (k == x) return true;
  if (moe)
    for (const char* x : kMoe)
      if (k == x) return true;
  return false;
}

// The Qwen3.5 fields (dense and MoE) after the common ones.
void parse_qwen3_5(const json& j, const Fields& f, ModelConfig& c, const std::string& origin) {
  const bool moe = c.model_type == "qwen3_5_moe";
  for (auto it = j.begin(); it != j.end(); ++it)
    TITAN_CHECK(qwen3_5_key_known(it.key(), moe), origin, ": field ", quote(printable(it.key(), 60)),
                " is not supported for ", c.model_type);
  c.linear_num_key_heads = f.positive("linear_num_key_heads", false, 16);
  c.linear_num_value_heads = f.positive("linear_num_value_heads", false, 32);
  c.linear_key_head_dim = f.positive("linear_key_head_dim", false, 128);
  c.linear_value_head_dim = f.positive("linear_value_head_dim", false, 128);
  c.linear_conv_kernel_dim = f.positive("linear_conv_kernel_dim", false, 4);
  if (f.present("mtp_num_hidden_layers")) f.integer("mtp_num_hidden_layers", false, 0);  // MTP heads: skipped on load
  TITAN_CHECK(f.boolean("attn_output_gate", true), origin,
              ": attn_output_gate false is not supported (Qwen3.5's full attention always has its gate)");
  if (moe) {
    c.shared_expert_intermediate_size = f.integer("shared_expert_intermediate_size", false, 512);
    if (c.shared_expert_intermediate_size < 0) f.bad("shared_expert_intermediate_size", "a non-negative integer",
                                                     *f.find("shared_expert_intermediate_size"));
    // Qwen3_5MoeTextConfig: every layer routed, top-k weights always renormalised.
    TITAN_CHECK(f.integer("decoder_sparse_step", false, 1) == 1, origin,
                ": decoder_sparse_step other than 1 is not supported for qwen3_5_moe (every layer is sparse)");
    TITAN_CHECK(c.mlp_only_layers.empty(), origin, ": mlp_only_layers is not supported for qwen3_5_moe");
    TITAN_CHECK(f.boolean("norm_topk_prob", true), origin,
                ": norm_topk_prob false is not supported for qwen3_5_moe (its router always renormalises)");
    c.norm_topk_prob = true;
  }
  // Mixers: layer_types, else every full_attention_interval-th layer full (transformers' default 4).
  c.layer_mixers.clear();
  if (const json* lt = f.find("layer_types"); lt && !lt->is_null()) {
    TITAN_CHECK(lt->is_array(), origin, ": field \"layer_types\" must be a list");
    TITAN_CHECK(int64_t(lt->size()) == c.num_hidden_layers, origin, ": layer_types has ", lt->size(),
                " entries but num_hidden_layers is ", c.num_hidden_layers);
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& e = (*lt)[i];
      const std::string s = e.is_string() ? e.get<std::string>() : std::string();
      TITAN_CHECK(s == "linear_attention" || s == "full_attention", origin, ": layer_types[", i, "] is ",
                  printable(e.dump(), 40), " (expected \"linear_attention\" or \"full_attention\")");
      c.layer_mixers.push_back(s == "full_attention" ? MixerKind::GatedAttention : MixerKind::GatedDeltaNet);
    }
  } else {
    const int64_t every = f.positive("full_attention_interval", false, 4);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      c.layer_mixers.push_back((i + 1) % every ? MixerKind::GatedDeltaNet : MixerKind::GatedAttention);
  }
}

}  // namespace

ModelConfig parse_hf_config(std::string_view text, const std::string& origin) {
  json j = parse_json_strict(text, origin);
  TITAN_CHECK(j.is_object(), origin, ": config.json must be a JSON object, got ", json_kind(j));
  const bool multimodal = unwrap_text_config(j, origin);
  Fields f(j, origin);
  ModelConfig c;
  c.flavor = "";
  c.from_multimodal = multimodal;
  c.model_type = f.string("model_type", true, "");
  // Qwen3.5's text configs ("qwen3_5_text", or the flat "qwen3_5") are the family "qwen3_5".
  if (c.model_type == "qwen3_5_text") c.model_type = "qwen3_5";
  if (c.model_type == "qwen3_5_moe_text") c.model_type = "qwen3_5_moe";
  const bool q35 = c.is_qwen3_5();
  TITAN_CHECK(architecture_of(c.model_type), origin, ": model_type ", quote(c.model_type), " is not supported (expected ",
              kKnownTypes, ")");
  const bool moe = c.is_moe();
  const bool qwen3 = c.model_type == "qwen3" || moe || q35;  // else llama or qwen2 (their configs' defaults)
  const char* arch = architecture_of(c.model_type);
  if (const json* a = f.find("architectures"); a && !a->is_null()) {
    TITAN_CHECK(a->is_array(), origin, ": field \"architectures\" must be a list");
    bool causal_lm = a->empty();
    for (const auto& e : *a) causal_lm |= e.is_string() && e.get<std::string>() == arch;
    TITAN_CHECK(causal_lm, origin, ": architectures ", printable(a->dump(), 80), " has no \"", arch,
                "\" (other heads are not supported)");
  }

  c.vocab_size = f.positive("vocab_size", true, 0);
  c.hidden_size = f.positive("hidden_size", true, 0);
  c.intermediate_size = f.positive("intermediate_size", !moe, q35 ? 512 : 6144);
  if (moe) {  // Qwen3MoeConfig's defaults for absent fields
    // transformers 5 writes the expert count as "num_local_experts" (its attribute_map alias of
    // num_experts); 4.x writes "num_experts". Either, or both when they agree.
    const bool has_local = f.find("num_local_experts") != nullptr, has_plain = f.find("num_experts") != nullptr;
    const char* key = has_local && !has_plain ? "num_local_experts" : "num_experts";
    c.num_experts = f.integer(key, false, q35 ? 256 : 128);
    if (c.num_experts < 0) f.bad(key, "a non-negative integer", *f.find(key));
    if (has_local && has_plain)
      TITAN_CHECK(f.integer("num_local_experts", false, 0) == c.num_experts, origin, ": num_experts (", c.num_experts,
                  ") and num_local_experts (", f.integer("num_local_experts", false, 0), ") disagree");
    c.num_experts_per_tok = f.positive("num_experts_per_tok", false, 8);
    c.moe_intermediate_size = f.positive("moe_intermediate_size", false, q35 ? 512 : 768);
    c.norm_topk_prob = f.boolean("norm_topk_prob", false);
    c.decoder_sparse_step = f.positive("decoder_sparse_step", false, 1);
    c.router_aux_loss_coef = f.number("router_aux_loss_coef", 0.001);
    c.output_router_logits = f.boolean("output_router_logits", false);
    if (const json* m = f.find("mlp_only_layers"); m && !m->is_null()) {
      if (!m->is_array()) f.bad("mlp_only_layers", "a list of layer indices", *m);
      for (const auto& e : *m) {
        if (!e.is_number_integer()) f.bad("mlp_only_layers", "a list of layer indices", *m);
        c.mlp_only_layers.push_back(e.get<int64_t>());
      }
    }
  }
  c.num_hidden_layers = f.positive("num_hidden_layers", true, 0);
  c.num_attention_heads = f.positive("num_attention_heads", true, 0);
  // HF's configs turn an explicit null into num_attention_heads; LlamaConfig an absent one too.
  if (const json* kv = f.find("num_key_value_heads"); (kv && kv->is_null()) || (!kv && c.model_type == "llama"))
    c.num_key_value_heads = c.num_attention_heads;
  else
    c.num_key_value_heads = f.positive("num_key_value_heads", true, 0);
  // Absent (or null) head_dim: Qwen3Config's default 128 (HF uses it, not hidden/heads); Llama and
  // Qwen2 derive hidden_size / num_attention_heads.
  if (qwen3) {
    c.head_dim = f.positive("head_dim", false, q35 ? 256 : 128);
  } else if (f.present("head_dim")) {
    c.head_dim = f.positive("head_dim", false, 0);
  } else {
    TITAN_CHECK(c.hidden_size % c.num_attention_heads == 0, origin, ": hidden_size (", c.hidden_size,
                ") is not a multiple of num_attention_heads (", c.num_attention_heads, ") and head_dim is absent");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.max_position_embeddings = f.positive("max_position_embeddings", false, c.model_type == "llama" ? 2048 : 32768);
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.initializer_range = f.number("initializer_range", 0.02);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.bos_token_id = f.token_id("bos_token_id", -1);
  c.eos_token_id = f.token_id("eos_token_id", -1);

  // RoPE: plain rotary only; theta from rope_parameters (transformers 5) or rope_theta (4.x).
  double theta_top = f.present("rope_theta") ? f.number("rope_theta", 0) : NAN;
  ModelConfig::RopeScaling from_params, from_scaling;
  // Qwen3.5: partial_rotary_factor (default 0.25) at the top level or in the rope object.
  double partial = q35 ? (f.present("partial_rotary_factor") ? f.number("partial_rotary_factor", 0.25) : 0.25) : 1.0;
  double* partial_p = q35 ? &partial : nullptr;
  double theta_params =
      f.find("rope_parameters")
          ? check_rope_object(*f.find("rope_parameters"), "rope_parameters", origin, &from_params, partial_p)
          : NAN;
  double theta_scaling =
      f.find("rope_scaling") ? check_rope_object(*f.find("rope_scaling"), "rope_scaling", origin, &from_scaling, partial_p)
                             : NAN;
  c.partial_rotary_factor = partial;
  // Both present (transformers 5 may write the two): they must say the same.
  if (!from_params.rope_type.empty() && !from_scaling.rope_type.empty())
    TITAN_CHECK(from_params.factor == from_scaling.factor && from_params.low_freq_factor == from_scaling.low_freq_factor &&
                    from_params.high_freq_factor == from_scaling.high_freq_factor &&
                    from_params.original_max_position_embeddings == from_scaling.original_max_position_embeddings,
                origin, ": rope_scaling and rope_parameters disagree");
  c.rope_scaling = !from_params.rope_type.empty() ? from_params : from_scaling;
  if (f.present("partial_rotary_factor") && !q35)
    TITAN_CHECK(f.number("partial_rotary_factor", 1.0) == 1.0, origin,
                ": partial_rotary_factor ", f.number("partial_rotary_factor", 1.0), " is not supported (only 1)");
  double theta = 10000.0;  // Qwen3Config's default
  const char* theta_from = nullptr;
  auto take = [&](double t, const char* from) {
    if (std::isnan(t)) return;
    if (theta_from)
      TITAN_CHECK(t == theta, origin, ": ", theta_from, " (", theta, ") and ", from, " (", t, ") disagree");
    theta = t;
    theta_from = from;
  };
  take(theta_top, "rope_theta");
  take(theta_scaling, "rope_scaling.rope_theta");
  take(theta_params, "rope_parameters.rope_theta");
  c.rope_theta = theta;

  // dtype: "torch_dtype" (transformers 4.x) or "dtype" (5.x); it only sets the export default.
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (!f.present(key)) continue;
    std::string s = f.string(key, false, "");
    DType t;
    TITAN_CHECK(parse_dtype(s, &t) && hf_dtype_name(t), origin, ": field \"", key, "\" ", quote(s),
                " is not supported (float32, bfloat16 or float16)");
    c.torch_dtype = t;
  }

  // Fields that would change the computation in ways this engine does not implement.
  TITAN_CHECK(!f.boolean("use_sliding_window", false), origin,
              ": use_sliding_window is true; sliding-window attention is not supported");
  if (const json* sw = f.find("sliding_window"); sw && !sw->is_null() && !sw->is_number_integer())
    f.bad("sliding_window", "an integer or null", *sw);
  if (const json* lt = f.find("layer_types"); lt && !lt->is_null() && !q35) {
    TITAN_CHECK(lt->is_array(), origin, ": field \"layer_types\" must be a list");
    TITAN_CHECK(int64_t(lt->size()) == c.num_hidden_layers, origin, ": layer_types has ", lt->size(),
                " entries but num_hidden_layers is ", c.num_hidden_layers);
    // Each entry names the layer's mixer kind; these families have softmax attention only
    // (Qwen3.5's "linear_attention" layers are the gated delta-net kind of its own family).
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& e = (*lt)[i];
      TITAN_CHECK(e.is_string() && e.get<std::string>() == hf_layer_type(MixerKind::Attention), origin,
                  ": layer_types[", i, "] is ", printable(e.dump(), 40), "; only \"full_attention\" is supported for ",
                  c.model_type);
      c.layer_mixers.push_back(MixerKind::Attention);
    }
  }
  if (c.model_type != "qwen2")  // Qwen2's q/k/v biases are part of the architecture, not a config field
    TITAN_CHECK(!f.boolean("attention_bias", false), origin,
                ": attention_bias is true; biased attention projections are not supported for ", c.model_type,
                " (only qwen2's q/k/v biases)");
  TITAN_CHECK(!f.boolean("mlp_bias", false), origin, ": mlp_bias is true; biased MLP projections are not supported");
  // pretraining_tp: transformers 4.x split the projections into that many slices (the same product);
  // 5.x ignores it. Either way the computation is unchanged, so any positive value is accepted.
  if (f.present("pretraining_tp")) f.positive("pretraining_tp", false, 1);
  std::string act = f.string("hidden_act", false, "silu");
  TITAN_CHECK(act == "silu", origin, ": hidden_act ", quote(act), " is not supported (only \"silu\")");
  double dropout = f.number("attention_dropout", 0.0);
  TITAN_CHECK(dropout == 0.0, origin, ": attention_dropout ", dropout, " is not supported (only 0)");
  TITAN_CHECK(!f.present("quantization_config"), origin, ": quantized checkpoints (quantization_config) are not supported");
  if (q35) {
    TITAN_CHECK(c.rope_scaling.rope_type.empty(), origin, ": qwen3.5 takes plain RoPE only (rope_type \"default\")");
    parse_qwen3_5(j, f, c, origin);
  }

  c.validate(origin);
  return c;
}

ModelConfig load_hf_config(const std::string& path) { return parse_hf_config(read_regular_file(path), path); }

namespace {
// Qwen3.5: the text model's config (Qwen3_5TextConfig / Qwen3_5MoeTextConfig field names), for
// Qwen3_5ForCausalLM / Qwen3_5MoeForCausalLM, whatever the source (a multimodal checkpoint's text part too).
std::string qwen3_5_config_json(const ModelConfig& c, const char* dt) {
  json j = json::object();
  const bool moe = c.model_type == "qwen3_5_moe";
  j["architectures"] = json::array({architecture_of(c.model_type)});
  j["model_type"] = moe ? "qwen3_5_moe_text" : "qwen3_5_text";
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = c.bos_token_id >= 0 ? json(c.bos_token_id) : json(nullptr);
  j["eos_token_id"] = c.eos_token_id >= 0 ? json(c.eos_token_id) : json(nullptr);
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["initializer_range"] = c.initializer_range;
  if (!moe) j["intermediate_size"] = c.intermediate_size;
  json types = json::array();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) types.push_back(hf_layer_type(c.layer_kind(l).mixer));
  j["layer_types"] = types;
  j["linear_conv_kernel_dim"] = c.linear_conv_kernel_dim;
  j["linear_key_head_dim"] = c.linear_key_head_dim;
  j["linear_num_key_heads"] = c.linear_num_key_heads;
  j["linear_num_value_heads"] = c.linear_num_value_heads;
  j["linear_value_head_dim"] = c.linear_value_head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta},
                          {"partial_rotary_factor", c.partial_rotary_factor}};
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = dt;
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  if (moe) {
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["output_router_logits"] = c.output_router_logits;
    j["router_aux_loss_coef"] = c.router_aux_loss_coef;
  }
  return j.dump(2) + "\n";
}
}  // namespace

std::string hf_config_json(const ModelConfig& c, DType export_dtype) {
  const char* dt = hf_dtype_name(export_dtype);
  TITAN_CHECK(dt, "config.json export: dtype ", dtype_name(export_dtype), " is not a floating type");
  json j = json::object();
  if (c.is_qwen3_5()) return qwen3_5_config_json(c, dt);
  j["architectures"] = json::array({architecture_of(c.model_type)});
  j["model_type"] = c.model_type;
  if (c.model_type != "qwen2") j["attention_bias"] = false;
  if (c.model_type == "llama") j["mlp_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = c.bos_token_id >= 0 ? json(c.bos_token_id) : json(nullptr);
  j["eos_token_id"] = c.eos_token_id >= 0 ? json(c.eos_token_id) : json(nullptr);
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["initializer_range"] = c.initializer_range;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  if (c.model_type != "llama") j["max_window_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["rms_norm_eps"] = c.rms_norm_eps;
  if (c.rope_scaling.rope_type.empty()) {
    j["rope_scaling"] = nullptr;
  } else {
    const auto& r = c.rope_scaling;
    j["rope_scaling"] = {{"rope_type", r.rope_type},
                         {"factor", r.factor},
                         {"low_freq_factor", r.low_freq_factor},
                         {"high_freq_factor", r.high_freq_factor},
                         {"original_max_position_embeddings", r.original_max_position_embeddings}};
  }
  j["rope_theta"] = c.rope_theta;
  if (c.model_type != "llama") j["sliding_window"] = nullptr;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = dt;
  j["use_cache"] = true;
  if (c.model_type != "llama") j["use_sliding_window"] = false;
  j["vocab_size"] = c.vocab_size;
  if (c.is_moe()) {
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["output_router_logits"] = c.output_router_logits;
    j["router_aux_loss_coef"] = c.router_aux_loss_coef;
  }
  return j.dump(2) + "\n";
}

}  // namespace titan
