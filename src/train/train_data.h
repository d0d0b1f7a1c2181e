// The trainer's data: the tokenizer ([model] hf_assets_path's tokenizer.json, else the bundled
// Qwen3 tokenizer), the dataset ([training] dataset_path, else the registry name [training]
// dataset), and the packing loader with its resumable position.
#pragma once
#include <memory>
#include <string>

#include "data/packed_loader.h"
#include "data/tokenizer.h"
#include "model/config.h"
#include "train/job_config.h"

namespace titan {

using data::Batch;

class TrainData {
 public:
  TrainData(const JobConfig& cfg, const ModelConfig& model);
  // This rank's micro-batch of the next global micro-batch.
  Batch next(int64_t rank, int64_t world);
  std::string state() const;                // opaque, for checkpoints
  void restore(const std::string& state);   // error names the checkpoint's data state
  const std::string& tokenizer_dir() const { return tokenizer_dir_; }

 private:
  std::string tokenizer_dir_;
  int64_t local_batch_, seq_len_;
  std::unique_ptr<data::PackedLoader> loader_;
};

}  // namespace titan
