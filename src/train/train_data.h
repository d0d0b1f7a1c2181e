// The trainer's data: the tokenizer ([model] hf_assets_path's tokenizer.json, else the bundled
// Qwen3 tokenizer), the dataset ([training] dataset_path, else the registry name [training]
// dataset) in its format ([training] dataset_format: a text stream packed by data/packed_loader.h,
// or chat conversations packed whole by data/chat_data.h), tokenized first or streamed while
// training ([training] dataset_streaming; data/token_stream.h, data/chat_stream.h: the same
// tokens either way), the resumable position, and with
// [model] attn_mask_type = "block_causal" each batch's document positions.
#pragma once
#include <memory>
#include <string>

#include "data/chat_data.h"
#include "data/chat_stream.h"
#include "data/packed_loader.h"
#include "data/token_stream.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "train/job_config.h"

namespace titan {

using data::Batch;

// The rows of a dataset for a fixed pass (validation): row i of a text stream is its i-th window
// of seq_len + 1 tokens, of a chat dataset its i-th packed row (both wrapping around).
class DataRows {
 public:
  // `files_or_name` as [training] dataset_path / dataset; format and masks as `cfg`'s [training].
  DataRows(const JobConfig& cfg, const data::Tokenizer& tok, const std::string& files_or_name, int64_t seq_len);
  // Rows [first, first + n) as a batch (positions when block-causal).
  Batch rows(uint64_t first, int64_t n) const;
  uint64_t size() const;  // rows before the data repeats (at least 1)
  std::string describe() const;

 private:
  int64_t seq_len_;
  bool block_causal_;
  uint32_t eot_;
  std::shared_ptr<const data::TokenDataset> text_;
  std::shared_ptr<const data::ChatRows> chat_;
};

class TrainData {
 public:
  TrainData(const JobConfig& cfg, const ModelConfig& model);
  // This rank's micro-batch of the next global micro-batch.
  Batch next(int64_t rank, int64_t world);
  std::string state() const;                // opaque, for checkpoints
  void restore(const std::string& state);   // error names the checkpoint's data state
  const std::string& tokenizer_dir() const { return tokenizer_dir_; }
  const data::Tokenizer& tokenizer() const { return *tok_; }
  std::string describe() const;
  // Tokens consumed per dataset of a mixture, all ranks together (empty for one dataset).
  std::vector<std::pair<std::string, uint64_t>> dataset_tokens() const;

 private:
  std::string tokenizer_dir_;
  std::unique_ptr<data::Tokenizer> tok_;
  int64_t local_batch_, seq_len_;
  bool block_causal_;
  std::unique_ptr<data::PackedLoader> loader_;  // text, tokenized first (the token cache)
  std::unique_ptr<data::TokenStream> stream_;   // text, streamed (data/token_stream.h)
  std::unique_ptr<DataRows> chat_;              // chat, encoded first: rows consumed so far in chat_position_
  uint64_t chat_position_ = 0;
  std::unique_ptr<data::ChatEncoder> chat_encoder_;  // chat, streamed
  std::unique_ptr<data::ChatStream> chat_stream_;
};

// Adds the document positions of `b` (block-causal: documents end at `separator`).
void add_document_positions(Batch& b, uint32_t separator);

}  // namespace titan
