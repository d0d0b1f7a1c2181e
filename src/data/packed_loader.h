// Packing and data-parallel sharding, as torchtitan packs text: the dataset's token stream
// (documents each followed by <|endoftext|>; Qwen has no BOS) is repeated endlessly and cut into
// consecutive windows of seq_len + 1 tokens; a sample is inputs = window[:-1], labels = window[1:].
//
// Sharding: global batch g is windows [g*G, (g+1)*G) with G = local_batch * world, whatever the
// number of ranks; rank r takes windows g*G + r*local_batch ... + local_batch - 1. The ranks'
// slices are disjoint and cover the global batch, so runs at different scales (and resumes at a
// different scale) see the same data in the same order.
//
// State: the number of tokens of the endless stream consumed so far (the same on every rank).
// restore(state()) continues with exactly the next token; the epoch is position / dataset size.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/tensor.h"
#include "data/dataset.h"

namespace titan::data {

struct LoaderState {
  uint64_t position = 0;        // tokens consumed (all ranks together)
  uint64_t dataset_tokens = 0;  // tokens per epoch of the dataset it was taken from
  uint64_t epoch() const { return dataset_tokens ? position / dataset_tokens : 0; }
  // {"position": N, "dataset_tokens": M}; from_json errors name `origin` and the reason.
  std::string to_json() const;
  static LoaderState from_json(std::string_view json, const std::string& origin);
  bool operator==(const LoaderState&) const = default;
};

struct Batch {
  Tensor inputs;   // i64 [local_batch, seq_len]
  Tensor labels;   // i64 [local_batch, seq_len]
  Tensor positions;  // i64 [local_batch, seq_len] of packed documents (block-causal), else undefined
  uint64_t epoch = 0;  // epoch of the batch's first token
};

class PackedLoader {
 public:
  // loop=false: a single pass; next_batch returns false once a whole global batch no longer fits.
  // Epoch wraps are logged (on rank 0 only) through `log`.
  explicit PackedLoader(std::shared_ptr<const TokenDataset> data, bool loop = true, LogFn log = log_to_stderr);

  // Fills this rank's slice of the next global batch. Every rank must call it with the same
  // local_batch, seq_len and world. Returns false only when loop=false and the data ran out.
  bool next_batch(int64_t local_batch, int64_t seq_len, int rank, int world, Batch* out);
  Batch next_batch(int64_t local_batch, int64_t seq_len, int rank, int world);  // errors when exhausted

  LoaderState state() const { return LoaderState{position_, data_->size()}; }
  // Errors when the state was taken on a dataset of another size.
  void restore(const LoaderState& s);
  uint64_t epoch() const { return position_ / data_->size(); }
  const TokenDataset& dataset() const { return *data_; }

 private:
  std::shared_ptr<const TokenDataset> data_;
  bool loop_;
  LogFn log_;
  uint64_t position_ = 0;
};

}  // namespace titan::data
