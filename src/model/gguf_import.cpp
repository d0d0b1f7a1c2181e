#include "model/gguf_import.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <unordered_map>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "io/gguf_quants.h"
#include "util/json_util.h"
#include "io/safetensors.h"
#include "util/output_folder.h"
#include "util/strings.h"

namespace titan {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

// GGUF architecture -> HF model_type.
const char* model_type_of(const std::string& arch) {
  if (arch == "llama") return "llama";
  if (arch == "qwen2") return "qwen2";
  if (arch == "qwen3") return "qwen3";
  if (arch == "qwen3moe") return "qwen3_moe";
  if (arch == "qwen35") return "qwen3_5";
  if (arch == "qwen35moe") return "qwen3_5_moe";
  return nullptr;
}

// A value stored as f32 (rms eps, rope base) printed with the shortest decimal that rounds back to
// the same f32, so config.json says 1e-05 rather than 9.999999747378752e-06 (the same f32 either way).
double shortest_f32(double v) {
  const float f = float(v);
  char buf[64];
  for (int digits = 1; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, double(f));
    if (std::strtof(buf, nullptr) == f) return std::strtod(buf, nullptr);
  }
  return double(f);
}

// What undoes llama.cpp's converter on one tensor (besides the name).
enum class Undo {
  None,
  PermuteQK,   // llama q/k rows (unpermute_qk_rows)
  NormShift,   // qwen35: zero-centred RMSNorm weights stored as 1 + w
  LogNegA,     // qwen35: ssm_a = -exp(A_log)  (and value heads tiled)
  VRows,       // qwen35: rows after `skip` are value heads of `hd` rows, tiled (untile_v_heads)
  VCols,       // qwen35: ssm_out's columns are value heads of `hd`, tiled
};

// One GGUF tensor's place in the HF checkpoint.
struct Mapped {
  const GgufTensorInfo* t;
  std::string hf;       // HF name (per expert for stacked experts)
  int64_t expert = -1;  // >= 0: slice `expert` of a stacked [E, ...] tensor
  Undo undo = Undo::None;
  int64_t heads = 0;    // PermuteQK: heads
  int64_t skip = 0, hd = 0;  // VRows / VCols / LogNegA: rows before the value heads, rows per head
};

}  // namespace

std::string gguf_to_hf_name(const std::string& g) {
  static const std::map<std::string, std::string> top = {{"token_embd.weight", "model.embed_tokens.weight"},
                                                        {"output_norm.weight", "model.norm.weight"},
                                                        {"output.weight", "lm_head.weight"}};
  if (auto it = top.find(g); it != top.end()) return it->second;
  if (g.rfind("blk.", 0) != 0) return "";
  const size_t dot = g.find('.', 4);
  if (dot == std::string::npos || dot == 4 || dot - 4 > 6) return "";
  for (size_t i = 4; i < dot; ++i)
    if (g[i] < '0' || g[i] > '9') return "";
  const std::string layer = g.substr(4, dot - 4), rest = g.substr(dot + 1);
  static const std::map<std::string, std::string> per_layer = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate_inp.weight", "mlp.gate.weight"},
      {"ffn_gate_exps.weight", "mlp.experts.{}.gate_proj.weight"},
      {"ffn_up_exps.weight", "mlp.experts.{}.up_proj.weight"},
      {"ffn_down_exps.weight", "mlp.experts.{}.down_proj.weight"},
      // qwen35 / qwen35moe (llama.cpp's names for Qwen3.5's layers)
      {"post_attention_norm.weight", "post_attention_layernorm.weight"},
      {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight"},
      {"attn_gate.weight", "linear_attn.in_proj_z.weight"},
      {"ssm_beta.weight", "linear_attn.in_proj_b.weight"},
      {"ssm_alpha.weight", "linear_attn.in_proj_a.weight"},
      {"ssm_conv1d.weight", "linear_attn.conv1d.weight"},
      {"ssm_dt.bias", "linear_attn.dt_bias"},
      {"ssm_a", "linear_attn.A_log"},
      {"ssm_norm.weight", "linear_attn.norm.weight"},
      {"ssm_out.weight", "linear_attn.out_proj.weight"},
      {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
      {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
  };
  auto it = per_layer.find(rest);
  if (it == per_layer.end()) return "";
  return "model.layers." + std::to_string(std::stoll(layer)) + "." + it->second;
}

void unpermute_qk_rows(const float* src, float* dst, int64_t n_heads, int64_t head_dim, int64_t cols) {
  // llama.cpp: w.reshape(n_heads, 2, D/2, cols).swapaxes(1, 2): GGUF row h*D + 2i + j holds HF
  // row h*D + j*D/2 + i (i < D/2, j in {0, 1}).
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const float* s = src + (h * head_dim + 2 * i + j) * cols;
        float* d = dst + (h * head_dim + j * half + i) * cols;
        std::copy(s, s + cols, d);
      }
}

void untile_v_heads(const float* src, float* dst, int64_t k_heads, int64_t v_per_k, int64_t head_rows, int64_t cols) {
  // llama.cpp: reshape(k_heads, v_per_k, head_rows, ...) with the first two axes swapped: GGUF
  // head j * k_heads + g holds HF head g * v_per_k + j.
  const int64_t n = head_rows * cols;
  for (int64_t g = 0; g < k_heads; ++g)
    for (int64_t j = 0; j < v_per_k; ++j) {
      const float* s = src + (j * k_heads + g) * n;
      std::copy(s, s + n, dst + (g * v_per_k + j) * n);
    }
}

ModelConfig gguf_model_config(const GgufFile& f) {
  const std::string& o = f.origin();
  const std::string arch = f.required_string("general.architecture");
  const char* mt = model_type_of(arch);
  TITAN_CHECK(mt, o, ": general.architecture ", quote(arch),
              " is not supported (llama, qwen2, qwen3, qwen3moe, qwen35, qwen35moe)");
  const std::string p = arch + ".";
  auto positive = [&](const std::string& key, std::optional<int64_t> v) {
    TITAN_CHECK(v.has_value(), o, ": missing metadata ", quote(key));
    TITAN_CHECK(*v > 0 && *v <= (int64_t(1) << 31), o, ": metadata ", quote(key), " = ", *v, " is out of range");
    return *v;
  };
  auto opt_positive = [&](const std::string& key, int64_t def) {
    auto v = f.integer(key);
    return v ? positive(key, v) : def;
  };
  ModelConfig c;
  c.flavor = "";
  c.model_type = mt;
  c.num_hidden_layers = positive(p + "block_count", f.integer(p + "block_count"));
  c.hidden_size = positive(p + "embedding_length", f.integer(p + "embedding_length"));
  c.num_attention_heads = positive(p + "attention.head_count", f.integer(p + "attention.head_count"));
  c.num_key_value_heads = opt_positive(p + "attention.head_count_kv", c.num_attention_heads);
  if (c.is_moe()) {
    c.num_experts = positive(p + "expert_count", f.integer(p + "expert_count"));
    c.num_experts_per_tok = positive(p + "expert_used_count", f.integer(p + "expert_used_count"));
    c.moe_intermediate_size = positive(p + "expert_feed_forward_length", f.integer(p + "expert_feed_forward_length"));
    c.intermediate_size = opt_positive(p + "feed_forward_length", c.moe_intermediate_size);
    // Qwen3-MoE normalizes the top-k weights (norm_topk_prob true in every published config).
    c.norm_topk_prob = f.boolean(p + "expert_weights_norm").value_or(true);
    if (c.model_type == "qwen3_5_moe") {
      TITAN_CHECK(c.norm_topk_prob, o, ": ", p, "expert_weights_norm false is not supported (Qwen3.5's router always renormalises)");
      c.shared_expert_intermediate_size = opt_positive(p + "expert_shared_feed_forward_length", 0);
    }
  } else {
    c.intermediate_size = positive(p + "feed_forward_length", f.integer(p + "feed_forward_length"));
  }
  const bool qwen3 = arch == "qwen3" || arch == "qwen3moe";
  const bool qwen35 = c.is_qwen3_5();
  if (auto kl = f.integer(p + "attention.key_length")) {
    c.head_dim = positive(p + "attention.key_length", kl);
  } else {
    TITAN_CHECK(!qwen35, o, ": missing metadata ", quote(p + "attention.key_length"));
    TITAN_CHECK(qwen3 || c.hidden_size % c.num_attention_heads == 0, o, ": embedding_length ", c.hidden_size,
                " is not a multiple of head_count ", c.num_attention_heads, " and attention.key_length is absent");
    c.head_dim = qwen3 ? 128 : c.hidden_size / c.num_attention_heads;
  }
  if (auto vl = f.integer(p + "attention.value_length"))
    TITAN_CHECK(*vl == c.head_dim, o, ": attention.value_length ", *vl, " differs from key_length ", c.head_dim,
                " (not supported)");
  if (qwen35) {
    // Qwen3.5: RoPE on the first rope.dimension_count of each head (its interleaved MRoPE,
    // rope.dimension_sections, is plain RoPE for text: the three position ids are equal); the
    // linear-attention shapes from ssm.*; every full_attention_interval-th layer full attention.
    // block_count includes the MTP layers (nextn_predict_layers), which import skips.
    const int64_t rd = positive(p + "rope.dimension_count", f.integer(p + "rope.dimension_count"));
    TITAN_CHECK(rd % 2 == 0 && rd <= c.head_dim, o, ": rope.dimension_count ", rd,
                " must be even and at most the head size ", c.head_dim);
    c.partial_rotary_factor = double(rd) / double(c.head_dim);
    c.linear_conv_kernel_dim = positive(p + "ssm.conv_kernel", f.integer(p + "ssm.conv_kernel"));
    c.linear_key_head_dim = positive(p + "ssm.state_size", f.integer(p + "ssm.state_size"));
    c.linear_num_key_heads = positive(p + "ssm.group_count", f.integer(p + "ssm.group_count"));
    c.linear_num_value_heads = positive(p + "ssm.time_step_rank", f.integer(p + "ssm.time_step_rank"));
    const int64_t inner = positive(p + "ssm.inner_size", f.integer(p + "ssm.inner_size"));
    TITAN_CHECK(inner % c.linear_num_value_heads == 0, o, ": ssm.inner_size ", inner,
                " is not a multiple of ssm.time_step_rank ", c.linear_num_value_heads);
    c.linear_value_head_dim = inner / c.linear_num_value_heads;
    TITAN_CHECK(c.linear_num_value_heads % c.linear_num_key_heads == 0, o, ": ssm.time_step_rank ",
                c.linear_num_value_heads, " is not a multiple of ssm.group_count ", c.linear_num_key_heads);
    if (auto n = f.integer(p + "nextn_predict_layers")) {
      TITAN_CHECK(*n >= 0 && *n < c.num_hidden_layers, o, ": nextn_predict_layers ", *n, " is out of range for ",
                  c.num_hidden_layers, " blocks");
      c.num_hidden_layers -= *n;
    }
    const int64_t every = opt_positive(p + "full_attention_interval", 4);
    c.layer_mixers.clear();
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      c.layer_mixers.push_back((i + 1) % every ? MixerKind::GatedDeltaNet : MixerKind::GatedAttention);
  } else if (auto rd = f.integer(p + "rope.dimension_count")) {
    TITAN_CHECK(*rd == c.head_dim, o, ": rope.dimension_count ", *rd, " differs from the head size ", c.head_dim,
                " (partial rotary embeddings are not supported)");
  }
  if (auto st = f.string(p + "rope.scaling.type"))
    TITAN_CHECK(*st == "none", o, ": ", p, "rope.scaling.type ", quote(*st), " is not supported");
  TITAN_CHECK(!f.find_tensor("rope_freqs.weight"), o,
              ": tensor \"rope_freqs.weight\" (per-frequency RoPE scaling, e.g. Llama 3.1) is not supported by import");
  c.rope_theta = shortest_f32(f.number(p + "rope.freq_base").value_or(10000.0));
  c.rms_norm_eps = shortest_f32(f.number(p + "attention.layer_norm_rms_epsilon").value_or(1e-6));
  c.max_position_embeddings = opt_positive(p + "context_length", 2048);
  const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
  TITAN_CHECK(emb, o, ": no tensor \"token_embd.weight\"");
  TITAN_CHECK(emb->ne.size() == 2, o, ": token_embd.weight must be 2-D");
  c.vocab_size = opt_positive(p + "vocab_size", emb->ne[1]);
  TITAN_CHECK(c.vocab_size == emb->ne[1], o, ": vocab_size ", c.vocab_size, " differs from token_embd.weight's ",
              emb->ne[1], " rows");
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  c.bos_token_id = f.integer("tokenizer.ggml.bos_token_id").value_or(-1);
  c.eos_token_id = f.integer("tokenizer.ggml.eos_token_id").value_or(-1);
  for (int64_t id : {c.bos_token_id, c.eos_token_id})
    TITAN_CHECK(id >= -1 && id < c.vocab_size, o, ": special token id ", id, " is outside the vocabulary");
  c.validate(o);
  return c;
}

namespace {

// The pre-tokenizer of tokenizer.ggml.pre, as tokenizers' JSON (llama.cpp's split expressions).
ojson pre_tokenizer_for(const std::string& pre, const std::string& origin) {
  const ojson byte_level_regex = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  auto split_then_bytes = [](const std::string& regex) {
    return ojson{{"type", "Sequence"},
                 {"pretokenizers",
                  {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                   {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}};
  };
  static const char* kQwen2 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  static const char* kLlama3 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  if (pre == "default" || pre == "gpt2" || pre.empty()) return byte_level_regex;  // GPT-2's expression
  if (pre == "smollm" || pre == "starcoder" || pre == "refact")  // each digit alone, then GPT-2's expression
    return ojson{{"type", "Sequence"},
                 {"pretokenizers",
                  {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}"}}}, {"behavior", "Isolated"}, {"invert", false}},
                   byte_level_regex}}};
  // Qwen3.5's tokenizer.json: Qwen2's expression with combining marks (\p{M}) kept in words.
  static const char* kQwen35 =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return split_then_bytes(kQwen2);
  if (pre == "qwen35") return split_then_bytes(kQwen35);
  if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe" || pre == "smaug-bpe") return split_then_bytes(kLlama3);
  fail(origin, ": tokenizer.ggml.pre ", quote(pre),
       " is not supported (default, gpt2, smollm, starcoder, refact, qwen2, deepseek-r1-qwen, qwen35, llama3, llama-bpe)");
}

}  // namespace

// Placeholders for the texts spliced into tokenizer.json, found from the end (nothing follows them
// in the dump, so a token spelled like one cannot be taken for it).
constexpr const char* kVocabMark = "\x01titan vocabulary\x01";
constexpr const char* kMergesMark = "\x01titan merges\x01";

std::string gguf_tokenizer_json(const GgufFile& f) {
  const std::string& o = f.origin();
  const std::string model = f.string("tokenizer.ggml.model").value_or("");
  TITAN_CHECK(model == "gpt2", o, ": tokenizer.ggml.model ", quote(model),
              " is not supported (only \"gpt2\", byte-level BPE)");
  const auto* tokens = f.array("tokenizer.ggml.tokens", GgufType::STRING);
  TITAN_CHECK(tokens && !tokens->empty(), o, ": missing metadata \"tokenizer.ggml.tokens\"");
  const auto* types = f.array("tokenizer.ggml.token_type", GgufType::I32);
  TITAN_CHECK(!types || types->size() == tokens->size(), o, ": tokenizer.ggml.token_type has ", types ? types->size() : 0,
              " entries for ", tokens->size(), " tokens");
  const auto* merges = f.array("tokenizer.ggml.merges", GgufType::STRING);
  TITAN_CHECK(merges, o, ": missing metadata \"tokenizer.ggml.merges\"");
  // The vocabulary and merges are written as text (an ordered_json object looks keys up linearly:
  // quadratic in the vocabulary), in the layout dump(1) gives them at their depth.
  std::unordered_map<std::string_view, size_t> ids;
  ids.reserve(tokens->size());
  std::string vocab_text = "{";
  ojson added = ojson::array();
  for (size_t i = 0; i < tokens->size(); ++i) {
    const std::string_view t = tokens->str_at(i);
    TITAN_CHECK(!t.empty(), o, ": token ", i, " is empty");
    auto [it, fresh] = ids.emplace(t, i);
    TITAN_CHECK(fresh, o, ": token ", quote(t), " appears twice (ids ", it->second, " and ", i, ")");
    vocab_text += i ? ",\n   " : "\n   ";
    vocab_text += ojson(t).dump();
    vocab_text += ": " + std::to_string(i);
    const int64_t ty = types ? types->int_at(i) : 1;
    if (ty == 3 || ty == 4)  // CONTROL: special added token; USER_DEFINED: added, not special
      added.push_back({{"id", int64_t(i)}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", ty == 3}});
  }
  vocab_text += "\n  }";
  std::string merges_text = "[";
  for (size_t i = 0; i < merges->size(); ++i) {
    const std::string_view m = merges->str_at(i);
    const size_t sp = m.find(' ');
    TITAN_CHECK(sp != std::string::npos && sp > 0 && sp + 1 < m.size() && m.find(' ', sp + 1) == std::string::npos, o,
                ": merge ", i, " ", quote(m), " is not two tokens separated by one space");
    merges_text += i ? ",\n   [\n    " : "\n   [\n    ";
    merges_text += ojson(m.substr(0, sp)).dump() + ",\n    " + ojson(m.substr(sp + 1)).dump() + "\n   ]";
  }
  merges_text += merges->size() ? "\n  ]" : "]";
  if (tokens->size() == 0) vocab_text = "{}";
  ojson j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = pre_tokenizer_for(f.string("tokenizer.ggml.pre").value_or("default"), o);
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", kVocabMark},
                {"merges", kMergesMark}};
  std::string text = j.dump(1) + "\n";
  size_t limit = std::string::npos;
  auto splice = [&](const char* mark, const std::string& with) {
    const std::string quoted = ojson(mark).dump();
    const size_t at = text.rfind(quoted, limit);
    TITAN_ASSERT(at != std::string::npos, "tokenizer.json: placeholder missing");
    text.replace(at, quoted.size(), with);
    limit = at;
  };
  splice(kMergesMark, merges_text);
  splice(kVocabMark, vocab_text);
  return text;
}

std::string gguf_tokenizer_config_json(const GgufFile& f, const ModelConfig& c) {
  const auto* tokens = f.array("tokenizer.ggml.tokens", GgufType::STRING);
  auto token = [&](const char* key) -> ojson {
    auto id = f.integer(key);
    if (!id || !tokens) return nullptr;
    TITAN_CHECK(*id >= 0 && size_t(*id) < tokens->size(), f.origin(), ": ", key, " ", *id, " is outside the vocabulary");
    return std::string(tokens->str_at(size_t(*id)));
  };
  ojson j;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  j["bos_token"] = token("tokenizer.ggml.bos_token_id");
  j["eos_token"] = token("tokenizer.ggml.eos_token_id");
  j["pad_token"] = token("tokenizer.ggml.padding_token_id");
  j["unk_token"] = token("tokenizer.ggml.unknown_token_id");
  j["add_bos_token"] = f.boolean("tokenizer.ggml.add_bos_token").value_or(false);
  j["add_eos_token"] = f.boolean("tokenizer.ggml.add_eos_token").value_or(false);
  j["clean_up_tokenization_spaces"] = false;
  j["model_max_length"] = c.max_position_embeddings;
  if (auto t = f.string("tokenizer.chat_template")) j["chat_template"] = *t;
  return j.dump(2) + "\n";
}

GgufImportReport import_gguf(const std::string& gguf_path, const std::string& out_dir, DType dtype, bool replace) {
  TITAN_CHECK(dtype == DType::F32 || dtype == DType::BF16, "import: --dtype must be f32 or bf16");
  GgufFile f = GgufFile::open(gguf_path);
  const std::string& o = f.origin();
  GgufImportReport rep;
  rep.config = gguf_model_config(f);
  ModelConfig& c = rep.config;
  c.torch_dtype = dtype;
  rep.architecture = f.required_string("general.architecture");
  rep.pre_tokenizer = f.string("tokenizer.ggml.pre").value_or("default");
  const bool llama = rep.architecture == "llama";
  const bool qwen35 = c.is_qwen3_5();

  // Map every GGUF tensor onto the HF parameters; each parameter exactly once, with its shape.
  std::map<std::string, Shape> want;
  for (const auto& s : model_param_specs(c)) want[s.name] = s.shape;
  std::vector<Mapped> plan;
  for (const auto& t : f.tensors()) {
    if (qwen35 && t.name.rfind("blk.", 0) == 0) {
      // Blocks from num_hidden_layers on are the multi-token-prediction layers (nextn_predict_layers):
      // not part of the model (transformers skips the HF checkpoint's mtp.* the same way).
      const size_t dot = t.name.find('.', 4);
      const std::string b = t.name.substr(4, dot == std::string::npos ? std::string::npos : dot - 4);
      if (!b.empty() && b.size() <= 6 && b.find_first_not_of("0123456789") == std::string::npos &&
          std::stoll(b) >= c.num_hidden_layers) {
        ++rep.skipped;
        continue;
      }
    }
    std::string hf = gguf_to_hf_name(t.name);
    TITAN_CHECK(!hf.empty(), o, ": tensor ", quote(t.name), " is not one import knows (", rep.architecture, ")");
    const GgmlTypeInfo* ti = ggml_type_info(t.type);
    TITAN_CHECK(ti && ti->dequantizable, o, ": tensor ", quote(t.name), " has type ", ti ? ti->name : "?",
                ", which import cannot dequantize");
    const size_t brace = hf.find("{}");
    if (brace != std::string::npos) {  // stacked experts [E, rows, cols] -> one HF tensor per expert
      TITAN_CHECK(t.ne.size() == 3 && t.ne[2] == c.num_experts, o, ": tensor ", quote(t.name), " must be [",
                  c.num_experts, ", ., .] (stacked experts)");
      for (int64_t e = 0; e < c.num_experts; ++e)
        plan.push_back({&t, hf.substr(0, brace) + std::to_string(e) + hf.substr(brace + 2), e});
    } else {
      Mapped m{&t, hf};
      auto ends = [&](const char* suffix) {
        const size_t n = std::strlen(suffix);
        return hf.size() >= n && hf.compare(hf.size() - n, n, suffix) == 0;
      };
      if (llama && ends("self_attn.q_proj.weight")) m.undo = Undo::PermuteQK, m.heads = c.num_attention_heads;
      if (llama && ends("self_attn.k_proj.weight")) m.undo = Undo::PermuteQK, m.heads = c.num_key_value_heads;
      if (qwen35) {
        // llama.cpp's converter (Qwen3_5TextModel / Qwen3_5MoeTextModel): norm weights but the
        // gated one stored as 1 + w; A_log as -exp(A_log); the linear layers' value heads
        // reordered from grouped by key head to tiled (_LinearAttentionVReorderBase).
        const int64_t KD = c.linear_key_dim();
        if (ends("layernorm.weight") || ends("q_norm.weight") || ends("k_norm.weight") || hf == "model.norm.weight")
          m.undo = Undo::NormShift;
        else if (ends("linear_attn.A_log")) m.undo = Undo::LogNegA, m.hd = 1;
        else if (ends("linear_attn.dt_bias") || ends("in_proj_b.weight") || ends("in_proj_a.weight"))
          m.undo = Undo::VRows, m.hd = 1;
        else if (ends("in_proj_z.weight")) m.undo = Undo::VRows, m.hd = c.linear_value_head_dim;
        else if (ends("in_proj_qkv.weight") || ends("conv1d.weight"))
          m.undo = Undo::VRows, m.skip = 2 * KD, m.hd = c.linear_value_head_dim;
        else if (ends("linear_attn.out_proj.weight")) m.undo = Undo::VCols, m.hd = c.linear_value_head_dim;
      }
      plan.push_back(m);
    }
  }
  std::map<std::string, const Mapped*> by_name;
  for (const auto& m : plan) {
    auto it = want.find(m.hf);
    TITAN_CHECK(it != want.end(), o, ": tensor ", quote(m.t->name), " (", m.hf, ") does not belong to a ", c.model_type,
                " model of this configuration");
    Shape shape = m.t->torch_shape();
    if (m.expert >= 0) shape.erase(shape.begin());
    // llama.cpp stores conv1d [C, 1, K] squeezed to [C, K], and may store the [1, H] shared-expert
    // gate as a vector.
    if (qwen35 && shape_numel(shape) == shape_numel(it->second) &&
        (m.hf.find("conv1d.weight") != std::string::npos || m.hf.find("shared_expert_gate") != std::string::npos) &&
        shape.size() < it->second.size())
      shape = it->second;
    TITAN_CHECK(shape == it->second, o, ": tensor ", quote(m.t->name), " has shape ", shape_str(shape), ", expected ",
                shape_str(it->second), " for ", m.hf);
    TITAN_CHECK(by_name.emplace(m.hf, &m).second, o, ": two tensors map to ", m.hf);
  }
  for (const auto& [name, shape] : want)
    TITAN_CHECK(by_name.count(name), o, ": no tensor for ", name, " (", c.model_type, " with ", c.num_hidden_layers,
                " layers)");

  // Everything checked: the tokenizer first (it can still refuse), then the files.
  const std::string tok_json = gguf_tokenizer_json(f);
  const std::string tok_cfg = gguf_tokenizer_config_json(f, c);
  OutputFolder out(out_dir, replace, "import");
  const std::string& tmp = out.path();
  std::vector<SafetensorsSpec> specs;
  for (const auto& [name, shape] : want) specs.push_back({name, dtype, shape});
  SafetensorsStreamWriter w(tmp + "/model.safetensors", specs, {{"source", "titan import gguf"}});
  // Tensors in file order; a stacked expert tensor is dequantized once for all its experts.
  const GgufTensorInfo* cached = nullptr;
  Tensor full;
  for (const auto& m : plan) {
    if (cached != m.t) {
      full = Tensor::empty({m.t->numel}, DType::F32);
      ggml_dequantize(m.t->type, f.bytes(*m.t).data(), m.t->numel, full.data<float>());
      cached = m.t;
    }
    const Shape& shape = want.at(m.hf);
    const int64_t n = shape_numel(shape);
    const int64_t Hk = c.linear_num_key_heads, r = Hk > 0 ? c.linear_num_value_heads / Hk : 1;
    const float* src = full.data<float>();
    Tensor out;
    if (m.expert >= 0) {
      out = full.slice0(m.expert * n, (m.expert + 1) * n).view(shape);
    } else if (m.undo == Undo::None) {
      out = full.view(shape);
    } else {
      out = Tensor::empty(shape, DType::F32);
      float* dst = out.data<float>();
      const int64_t cols = n / shape[0];
      switch (m.undo) {
        case Undo::PermuteQK:
          unpermute_qk_rows(src, dst, m.heads, c.head_dim, shape[1]);
          break;
        case Undo::NormShift:
          for (int64_t i = 0; i < n; ++i) dst[i] = src[i] - 1.0f;
          break;
        case Undo::LogNegA: {
          std::vector<float> a(static_cast<size_t>(n));
          for (int64_t i = 0; i < n; ++i) {
            TITAN_CHECK(src[i] < 0.0f && std::isfinite(src[i]), o, ": tensor ", quote(m.t->name), " element ", i,
                        " is ", src[i], " (ssm_a must be -exp(A_log) < 0)");
            a[size_t(i)] = std::log(-src[i]);
          }
          untile_v_heads(a.data(), dst, Hk, r, 1, 1);
          break;
        }
        case Undo::VRows:
          std::copy(src, src + m.skip * cols, dst);
          untile_v_heads(src + m.skip * cols, dst + m.skip * cols, Hk, r, m.hd, cols);
          break;
        case Undo::VCols: {
          const int64_t rows = shape[0];
          for (int64_t i = 0; i < rows; ++i) untile_v_heads(src + i * cols, dst + i * cols, Hk, r, m.hd, 1);
          break;
        }
        case Undo::None:
          break;
      }
    }
    w.write(m.hf, out);
    rep.params += shape_numel(shape);
  }
  w.commit();
  write_file_atomic(tmp + "/config.json", hf_config_json(c, dtype));
  write_file_atomic(tmp + "/tokenizer.json", tok_json);
  write_file_atomic(tmp + "/tokenizer_config.json", tok_cfg);
  out.commit();
  rep.tensors = int64_t(f.tensors().size());
  rep.vocab = c.vocab_size;
  if (const auto* mg = f.array("tokenizer.ggml.merges", GgufType::STRING)) rep.merges = int64_t(mg->size());
  return rep;
}

}  // namespace titan
