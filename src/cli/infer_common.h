// Shared by titan generate / chat / eval: loading a model for inference (an HF folder or a
// training checkpoint), its tokenizer and chat template, the sampling settings (flags over the
// model's generation_config.json over transformers' defaults), and options that may repeat.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/command.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "infer/generate.h"
#include "infer/generation_config.h"
#include "model/decoder.h"

namespace titan::cli {

// Removes every `--key VALUE` / `--key=VALUE` from argv and returns the values in order.
std::vector<std::string> take_repeated(std::vector<std::string>& argv, const std::string& key);
// Removes `--key V1 V2 ...` (values up to the next --option) and `--key=V`, all occurrences.
std::vector<std::string> take_list(std::vector<std::string>& argv, const std::string& key);

struct InferenceModel {
  std::unique_ptr<DecoderModel> model;
  std::string dir;
  bool hf = false;             // an HF folder (else a training checkpoint)
  data::Tokenizer tokenizer;
  std::string tokenizer_dir;   // where tokenizer.json (and the chat template) came from
  infer::GenerationDefaults defaults;
};

// --model DIR|CHECKPOINT_STEP, --tokenizer DIR (default: the model folder when it has a
// tokenizer.json, else the bundled one), --dtype f32|bf16, --kernels cpu|reference.
InferenceModel load_inference_model(const Args& args);

// Reads --temperature --top-k --top-p --min-p --repetition-penalty --seed --max-new-tokens --stop
// (given as `stops`) and the EOS / pad ids. Sampling is on when --temperature > 0, or when it is
// not given and generation_config.json has do_sample true (then its temperature, default 1.0);
// unset settings come from generation_config.json, else transformers' defaults (top_k 50 when
// sampling, top_p 1, no min_p, penalty 1); max_new_tokens defaults to 256. EOS ids: the model
// folder's generation_config.json / config.json; for a training checkpoint <|endoftext|>, and in
// chat mode also the template's eos_token.
infer::GenerateOptions generation_options(const Args& args, const InferenceModel& m,
                                          const std::vector<std::string>& stops, bool chat);

// --system / --thinking on|off applied to a user turn.
data::ChatOptions chat_options(const Args& args);
std::vector<uint32_t> parse_id_list(const std::string& text, const std::string& what);

}  // namespace titan::cli
