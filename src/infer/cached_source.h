// LogitsSource over the model's KV-cache forward (DecoderModel::forward_cached): prefill runs the
// whole left-padded prompt batch in one forward, each decode_step only the appended column.
#pragma once
#include "core/tensor.h"
#include "infer/logits_source.h"
#include "model/inference_state.h"

namespace titan {
class DecoderModel;
}

namespace titan::infer {

class CachedLogitsSource : public LogitsSource {
 public:
  explicit CachedLogitsSource(DecoderModel& model) : model_(model) {}
  int64_t vocab_size() const override;
  int64_t max_positions() const override;
  void prefill(const LeftPaddedBatch& batch, float* logits) override;
  void decode_step(const LeftPaddedBatch& batch, const std::vector<bool>& active, float* logits) override;
  const InferenceState& cache() const { return cache_; }

  // Work and wall time since construction: prompt tokens (padding excluded) and their prefill
  // seconds; generated-token steps (one per active row) and their decode seconds.
  struct Timing {
    int64_t prefill_tokens = 0, decode_tokens = 0;
    double prefill_s = 0, decode_s = 0;
  };
  const Timing& timing() const { return timing_; }

 private:
  void run(const LeftPaddedBatch& batch, int64_t c0, float* logits);
  DecoderModel& model_;
  InferenceState cache_;
  Timing timing_;
};

}  // namespace titan::infer
