// The training loop behind `titan train`: one entry point for the three ways to build a model
// (an HF folder, a built-in flavor, either with kernel replacements).
//
// A step: for each micro-batch (global batch / (local batch x data-parallel degree) of them)
// forward + backward with gradients of the token-mean loss over the whole global batch
// accumulated; global L2 norm and clipping; a non-finite check; AdamW with the step's lr; metrics.
// Checkpoints at [checkpoint] interval and on SIGINT/SIGTERM; an HF export at the end when asked.
#pragma once
#include <memory>
#include <string>

#include "io/hf_checkpoint.h"
#include "model/qwen3.h"
#include "train/job_config.h"

namespace titan {

struct TrainResult {
  int64_t last_step = 0;
  double last_loss = 0;
  bool stopped_by_signal = false;
  std::string last_checkpoint;  // folder, "" when none written
  std::string hf_export;        // folder, "" when none written
};

// The model configuration a job describes ([checkpoint] initial_load_path with initial_load_in_hf:
// the HF folder's; else [model] hf_assets_path's config.json; else [model] flavor), overrides
// applied ([model] n_layers, and for qwen3_moe num_experts / top_k); ckpt_out receives the opened
// initial HF checkpoint when the job loads one.
ModelConfig job_model_config(const JobConfig& cfg, std::unique_ptr<HfCheckpoint>* ckpt_out = nullptr);

namespace dist {
class Comm;
}

// One process (a LocalComm).
TrainResult run_training(const JobConfig& cfg);
// Data parallel over the ranks of `comm` (every rank calls it with the same config; checked):
// each rank takes its slice of every global micro-batch, the loss is the mean over the global
// batch's tokens, gradients are summed over ranks; parameters, gradients and optimizer state are
// fully sharded (dist/fsdp.h) or replicated (train/model_state.h); rank 0 alone logs and writes
// metrics, every rank its checkpoint shard.
TrainResult run_training(const JobConfig& cfg, dist::Comm& comm);

}  // namespace titan
