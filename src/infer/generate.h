// The decoding loop: prompts -> generated ids, text and finish reason, over any LogitsSource.
//
// Per step and row: the row's logits go through the logits processors and the sampler
// (infer/sampling.h; the repetition penalty sees the row's prompt and generated ids), the token is
// appended, its text streamed once complete (infer/stream.h), and the stop rules checked
// (infer/stopping.h). Finished rows stop growing (the batch gives them pad columns) and the loop
// ends when every row has finished. Row r samples from stream first_stream + r, so a prompt's
// tokens depend only on its index, not on the batch it runs in.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "infer/logits_source.h"
#include "infer/sampling.h"
#include "infer/stopping.h"

namespace titan::data {
class Tokenizer;
}

namespace titan::infer {

struct GenerateOptions {
  SamplingParams sampling;
  StopParams stop;
  uint32_t pad_id = 0;        // left padding and finished rows' columns
  uint64_t first_stream = 0;  // sampling stream of row 0
  // When set and raised (a signal handler, another thread), every unfinished row ends with
  // FinishReason::Interrupted after the current step; its tokens so far are kept.
  const std::atomic<bool>* interrupt = nullptr;
};

struct GenerationResult {
  std::vector<uint32_t> prompt_ids;
  std::vector<uint32_t> ids;  // generated only (EOS / stop token included)
  std::string text;           // decode(ids, skip_special_tokens=true)
  FinishReason finish = FinishReason::None;
};

// Streamed text of row `row` as it becomes complete UTF-8 (special tokens skipped); the pieces of
// a row concatenate to its result's text.
using TextFn = std::function<void(size_t row, const std::string& piece)>;

// Errors when a prompt is empty or a row would exceed src.max_positions().
std::vector<GenerationResult> generate(LogitsSource& src, const data::Tokenizer& tok,
                                       const std::vector<std::vector<uint32_t>>& prompts, const GenerateOptions& opt,
                                       const TextFn& on_text = {});

// The JSON line of one result: {"prompt_ids": [...], "ids": [...], "text": "...",
// "finish_reason": "eos"|"length"|"stop"}.
std::string result_json(const GenerationResult& r);

}  // namespace titan::infer
