#include "cli/infer_common.h"

#include <cstdint>
#include <filesystem>
#include <limits>

#include "core/error.h"
#include "model/base_fingerprint.h"
#include "model/hf_model.h"
#include "model/peft_adapter.h"
#include "train/checkpoint_model.h"

namespace titan::cli {
namespace fs = std::filesystem;

namespace {
// Removes every `--key V` / `--key=V` from argv and returns the values; `many`: `--key V1 V2 ...`
// takes the values up to the next option.
std::vector<std::string> take_values(std::vector<std::string>& argv, const std::string& key, bool many) {
  std::vector<std::string> values, rest;
  const std::string flag = "--" + key, prefix = flag + "=";
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == flag) {
      if (!many) {
        TITAN_CHECK(i + 1 < argv.size(), "option ", flag, " needs a value");
        values.push_back(argv[++i]);
        continue;
      }
      size_t j = i + 1;
      while (j < argv.size() && argv[j].rfind("--", 0) != 0) values.push_back(argv[j++]);
      TITAN_CHECK(j > i + 1, "option ", flag, " needs at least one value");
      i = j - 1;
    } else if (argv[i].rfind(prefix, 0) == 0) {
      values.push_back(argv[i].substr(prefix.size()));
    } else {
      rest.push_back(argv[i]);
    }
  }
  argv = std::move(rest);
  return values;
}
}  // namespace

std::vector<std::string> take_repeated(std::vector<std::string>& argv, const std::string& key) {
  return take_values(argv, key, false);
}

std::vector<std::string> take_list(std::vector<std::string>& argv, const std::string& key) {
  return take_values(argv, key, true);
}

std::vector<uint32_t> parse_id_list(const std::string& text, const std::string& what) {
  std::vector<uint32_t> ids;
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) return;
    size_t used = 0;
    unsigned long long v = 0;
    try {
      v = std::stoull(cur, &used);
    } catch (...) {
      used = 0;
    }
    TITAN_CHECK(used == cur.size() && cur[0] != '-' && v <= UINT32_MAX, what, ": '", cur, "' is not a token id");
    ids.push_back(uint32_t(v));
    cur.clear();
  };
  for (char c : text) {
    if (c == ' ' || c == ',' || c == '\t' || c == '\n') flush();
    else cur += c;
  }
  flush();
  return ids;
}

InferenceModel load_inference_model(const Args& args) {
  InferenceModel m;
  m.dir = args.require("model");
  TITAN_CHECK(fs::is_directory(m.dir), "--model ", m.dir, ": not a folder (an HF model folder or a checkpoint step)");
  m.hf = is_hf_folder(m.dir);
  const std::string kernels = args.get("kernels", default_variant());
  const std::string dtype = args.get("dtype", "f32");
  TITAN_CHECK(dtype == "f32" || dtype == "bf16", "--dtype must be f32 or bf16, got '", dtype, "'");
  const DType compute = dtype == "bf16" ? DType::BF16 : DType::F32;
  // Inference holds one copy of the weights, no gradients: with bf16, the matmul weights are read
  // from the files straight into bf16 (half the memory of f32); a training checkpoint is loaded in
  // f32 and converted. A LoRA adapter (--adapter, or a LoRA run's checkpoint) keeps f32 weights
  // with bf16 copies made once.
  const DType weights = args.has("adapter") ? DType::F32 : compute;
  if (m.hf) {
    m.model = load_hf_model(m.dir, kernels, /*frozen=*/true, weights);
  } else {
    m.model = load_checkpoint_model(m.dir, nullptr, nullptr, args.has("allow-other-base"));
    if (weights == DType::BF16 && !m.model->lora_enabled()) m.model = with_weight_dtype(*m.model, weights);
  }
  if (args.has("adapter")) {
    const std::string adapter = args.get("adapter");
    if (m.hf)  // only on the base it was trained on, when the folder records it (titan_base.json)
      check_base_fingerprint(adapter, adapter_base_fingerprint(adapter), m.dir, args.has("allow-other-base"),
                             "--allow-other-base");
    load_peft_adapter(*m.model, adapter);  // LoRA, not merged
    m.model->merge_lora_parameters();  // but MoE-parameter adapters once here, not in every pass (the same values)
  }
  m.model->set_compute_dtype(compute);
  m.model->hold_compute_weights(true);  // f32 weights with bf16 compute: bf16 copies made once, not per token
  if (args.has("tokenizer")) m.tokenizer_dir = args.get("tokenizer");
  else if (fs::exists(fs::path(m.dir) / "tokenizer.json")) m.tokenizer_dir = m.dir;
  else m.tokenizer_dir = data::Tokenizer::default_dir();
  m.tokenizer = data::Tokenizer::load(m.tokenizer_dir);
  if (m.hf) m.defaults = infer::read_generation_defaults(m.dir);
  return m;
}

infer::GenerateOptions generation_options(const Args& args, const InferenceModel& m,
                                          const std::vector<std::string>& stops, bool chat) {
  const infer::GenerationDefaults& g = m.defaults;
  infer::GenerateOptions o;
  infer::SamplingParams& s = o.sampling;
  constexpr double kAny = std::numeric_limits<double>::max();
  // Ranges are checked by infer::validate, which names the option and the allowed values.
  if (args.has("temperature")) s.temperature = args.get_double("temperature", 0, -kAny, kAny);
  else if (g.do_sample.value_or(false)) s.temperature = g.temperature.value_or(1.0);
  else s.temperature = 0;
  const bool sampling = s.temperature > 0;
  s.top_k = args.get_int("top-k", g.top_k.value_or(sampling ? 50 : 0), INT64_MIN, INT64_MAX);
  s.top_p = args.get_double("top-p", g.top_p.value_or(1.0), -kAny, kAny);
  s.min_p = args.get_double("min-p", g.min_p.value_or(0.0), -kAny, kAny);
  s.repetition_penalty = args.get_double("repetition-penalty", g.repetition_penalty.value_or(1.0), -kAny, kAny);
  s.seed = args.get_uint64("seed", 0, 0, UINT64_MAX);
  infer::validate(s);
  o.stop.max_new_tokens = args.get_int("max-new-tokens", g.max_new_tokens.value_or(256), INT64_MIN, INT64_MAX);
  o.stop.stop_strings = stops;
  o.stop.eos_ids = g.eos_ids;
  if (!m.hf) {
    o.stop.eos_ids.push_back(m.tokenizer.eot_id());
    if (chat) {
      int64_t im_end = m.tokenizer.token_to_id("<|im_end|>");
      if (im_end >= 0) o.stop.eos_ids.push_back(uint32_t(im_end));
    }
  }
  infer::validate(o.stop);
  if (g.pad_id) o.pad_id = *g.pad_id;
  else if (!o.stop.eos_ids.empty()) o.pad_id = o.stop.eos_ids[0];
  // Ids from the model folder's files must be tokens of the model (the embedding would refuse
  // them later, naming no file).
  const int64_t vocab = m.model->config().vocab_size;
  const std::string& from = g.origin.empty() ? m.dir : g.origin;
  if (g.pad_id)
    TITAN_CHECK(int64_t(*g.pad_id) < vocab, from, ": pad_token_id ", *g.pad_id, " is outside the vocabulary (", vocab,
                " tokens)");
  for (uint32_t id : g.eos_ids)
    TITAN_CHECK(int64_t(id) < vocab, from, ": eos_token_id ", id, " is outside the vocabulary (", vocab, " tokens)");
  return o;
}

data::ChatOptions chat_options(const Args& args) {
  data::ChatOptions c;
  c.add_generation_prompt = true;
  if (args.has("thinking")) {
    const std::string t = args.get("thinking");
    TITAN_CHECK(t == "on" || t == "off", "--thinking must be on or off, got '", t, "'");
    c.enable_thinking = t == "on";
  }
  return c;
}

}  // namespace titan::cli
