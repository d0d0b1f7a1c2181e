// TEST REFERENCE for the KV-cache source (src/infer/kv_source.*): every call recomputes each
// active row's whole unpadded sequence with the scoring entry point DecoderModel::forward(ids,
// labels = all -100, &logits) and keeps the logits of its last position. Exact by construction
// (each row is what it would be alone, so left padding needs no attention mask) but O(n^2) in the
// generated length; the tests check that the cached source gives the same logits.
#include "recompute_source.h"

#include <algorithm>
#include <cstring>

#include "core/tensor.h"
#include "model/decoder.h"

namespace titan::infer {

int64_t RecomputeLogitsSource::vocab_size() const { return model_.config().vocab_size; }

int64_t RecomputeLogitsSource::max_positions() const { return model_.config().max_position_embeddings; }

void RecomputeLogitsSource::row_logits(const LeftPaddedBatch& batch, int64_t r, float* out) {
  const std::vector<uint32_t> seq = batch.row(r);
  const int64_t S = int64_t(seq.size()), V = vocab_size();
  Tensor ids = Tensor::empty({1, S}, DType::I64), labels = Tensor::empty({1, S}, DType::I64);
  for (int64_t t = 0; t < S; ++t) {
    ids.data<int64_t>()[t] = int64_t(seq[size_t(t)]);
    labels.data<int64_t>()[t] = -100;
  }
  Tensor logits = Tensor::empty({S, V}, DType::F32);
  model_.forward(ids, labels, &logits);
  std::memcpy(out, logits.data<float>() + (S - 1) * V, size_t(V) * sizeof(float));
}

void RecomputeLogitsSource::prefill(const LeftPaddedBatch& batch, float* logits) {
  for (int64_t r = 0; r < batch.rows; ++r) row_logits(batch, r, logits + r * vocab_size());
}

void RecomputeLogitsSource::decode_step(const LeftPaddedBatch& batch, const std::vector<bool>& active, float* logits) {
  for (int64_t r = 0; r < batch.rows; ++r)
    if (active[size_t(r)]) row_logits(batch, r, logits + r * vocab_size());
}

}  // namespace titan::infer
