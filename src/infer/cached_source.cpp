// Finished rows keep being computed (their pad columns are masked in, as transformers' generate
// does); their logits are simply not read. The batch's bookkeeping (infer/batch.h) and the cache's
// agree by construction: positions are column - pad[r], which is what forward_cached derives from
// cache.first; prefill checks it.
#include "infer/cached_source.h"

#include <chrono>
#include <cstring>

#include "core/error.h"
#include "model/decoder.h"

namespace titan::infer {

int64_t CachedLogitsSource::vocab_size() const { return model_.config().vocab_size; }

int64_t CachedLogitsSource::max_positions() const { return model_.config().max_position_embeddings; }

// Columns [c0, width) of every row through the cached forward.
void CachedLogitsSource::run(const LeftPaddedBatch& batch, int64_t c0, float* logits) {
  TITAN_CHECK(cache_.rows == batch.rows && cache_.len == c0, "KV cache: the batch has ", batch.width,
              " columns but the cache holds ", cache_.len, " (decode_step without prefill?)");
  const int64_t S = batch.width - c0;
  Tensor ids = Tensor::empty({batch.rows, S}, DType::I64);
  for (int64_t r = 0; r < batch.rows; ++r)
    for (int64_t c = 0; c < S; ++c) ids.data<int64_t>()[r * S + c] = int64_t(batch.at(r, c0 + c));
  Tensor out = Tensor::empty({batch.rows, vocab_size()}, DType::F32);
  model_.forward_cached(ids, cache_, out);
  std::memcpy(logits, out.data<float>(), size_t(out.numel()) * sizeof(float));
}

void CachedLogitsSource::prefill(const LeftPaddedBatch& batch, float* logits) {
  for (int64_t r = 0; r < batch.rows; ++r)
    for (int64_t c = batch.pad[size_t(r)]; c < batch.width; ++c)
      TITAN_ASSERT(batch.positions[size_t(r * batch.width + c)] == c - batch.pad[size_t(r)] &&
                       batch.mask[size_t(r * batch.width + c)] == 1,
                   "left-padded batch: row ", r, " column ", c, " is not at position column - padding");
  cache_.reset(batch.pad);
  const auto t0 = std::chrono::steady_clock::now();
  run(batch, 0, logits);
  timing_.prefill_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int64_t r = 0; r < batch.rows; ++r) timing_.prefill_tokens += batch.width - batch.pad[size_t(r)];
}

void CachedLogitsSource::decode_step(const LeftPaddedBatch& batch, const std::vector<bool>& active, float* logits) {
  const auto t0 = std::chrono::steady_clock::now();
  run(batch, batch.width - 1, logits);
  timing_.decode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const bool a : active) timing_.decode_tokens += a ? 1 : 0;
}

}  // namespace titan::infer
