// torchtitan's validator: every [validation] freq steps (and at the last step) the loss on a
// held-out set, logged as a console line, in metrics.jsonl and in TensorBoard, with its
// perplexity exp(loss).
//
// The held-out set is rows 0 .. N-1 of the validation data (N = steps x local_batch_size;
// train_data.h's DataRows: text windows or packed chat rows of [validation] seq_len), in the
// training data's format and attention mask. It is the same set for any rank count: rank r of W
// takes the contiguous rows [r ceil(N/W), (r+1) ceil(N/W)) in forwards of up to local_batch_size
// rows, every rank running the same number of forwards (a rank out of rows runs one row with no
// labels), as sharded parameters need; the loss is the sum over all ranks' labelled tokens
// divided by their count (all-reduced, rank order). Forwards only: no gradient, no state change.
//
// [validation] sample_prompts: at each validation, the greedy continuation (up to
// sample_max_tokens) of each prompt through infer/generate.h, printed by rank 0; chat data's
// prompts go through the chat template as a user turn. Only where generation is available: one
// process with whole weights.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace titan {

struct ValidationResult {
  double loss = 0;      // mean over labelled tokens
  int64_t tokens = 0;   // labelled tokens, all ranks
  double seconds = 0;
};

class Validator {
 public:
  // Loads the held-out data (every rank; no collective).
  Validator(const JobConfig& cfg, const data::Tokenizer& tok, const std::string& tokenizer_dir);
  // Collective: every rank calls it.
  // Rows split over `comm` (the mesh's batch group); the loss and count summed over loss_comm
  // (the loss group: with context parallelism each rank scores its chunks of the rows), else comm.
  ValidationResult run(DecoderModel& model, comm::Comm& comm, comm::Comm* loss_comm = nullptr) const;
  // Greedy continuations of [validation] sample_prompts (call on one process with whole weights).
  std::vector<std::string> samples(DecoderModel& model) const;
  const DataRows& rows() const { return *rows_; }

 private:
  const JobConfig& cfg_;
  const data::Tokenizer& tok_;
  std::string tokenizer_dir_;
  std::unique_ptr<DataRows> rows_;
};

}  // namespace titan
