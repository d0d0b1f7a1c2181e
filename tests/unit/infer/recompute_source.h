// LogitsSource over DecoderModel::forward with no cache: the tests' reference (recompute_source.cpp).
#pragma once
#include "infer/logits_source.h"

namespace titan {
class DecoderModel;
}

namespace titan::infer {

class RecomputeLogitsSource : public LogitsSource {
 public:
  explicit RecomputeLogitsSource(DecoderModel& model) : model_(model) {}
  int64_t vocab_size() const override;
  int64_t max_positions() const override;
  void prefill(const LeftPaddedBatch& batch, float* logits) override;
  void decode_step(const LeftPaddedBatch& batch, const std::vector<bool>& active, float* logits) override;

 private:
  void row_logits(const LeftPaddedBatch& batch, int64_t r, float* out);
  DecoderModel& model_;
};

}  // namespace titan::infer
