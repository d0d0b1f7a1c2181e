// What the decoding loop (infer/generate.h) asks a model for: next-token logits for every row of
// a left-padded batch, first after the prompts (prefill), then after each appended column
// (decode_step). The loop, sampling, stopping, streaming and output only see this interface, so
// a KV-cache forward replaces the implementation without touching them.
#pragma once
#include <cstdint>
#include <vector>

#include "infer/batch.h"

namespace titan::infer {

class LogitsSource {
 public:
  virtual ~LogitsSource() = default;
  virtual int64_t vocab_size() const = 0;
  // The longest row (prompt + generated tokens) the model can take; 0: no limit.
  virtual int64_t max_positions() const = 0;
  // A new batch: logits [rows, vocab] f32 of the position after each row's last prompt token.
  virtual void prefill(const LeftPaddedBatch& batch, float* logits) = 0;
  // `batch` has one more column than at the previous call: logits [rows, vocab] after it. Rows
  // with active[r] false are finished; their logits may be left unset.
  virtual void decode_step(const LeftPaddedBatch& batch, const std::vector<bool>& active, float* logits) = 0;
};

}  // namespace titan::infer
