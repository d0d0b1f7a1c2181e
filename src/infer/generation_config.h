// Generation defaults of a model folder, as transformers reads them: generation_config.json when
// the folder has one, else the model's config.json (GenerationConfig.from_model_config): the EOS
// ids (eos_token_id, an int or a list), pad_token_id, and the sampling settings a checkpoint
// recommends (do_sample, temperature, top_k, top_p, min_p, repetition_penalty, max_new_tokens).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace titan::infer {

struct GenerationDefaults {
  std::string origin;  // the file read, "" when none
  std::vector<uint32_t> eos_ids;
  std::optional<uint32_t> pad_id;
  std::optional<bool> do_sample;
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k, max_new_tokens;
};

// Errors name the file and the key with a value of the wrong type.
GenerationDefaults read_generation_defaults(const std::string& model_dir);
GenerationDefaults parse_generation_defaults(const std::string& json_text, const std::string& origin);

}  // namespace titan::infer
