// A model straight from a training checkpoint folder (step-N/, as CheckpointManager writes it):
// the model config recorded in its state.json, the weights from model.tensors or, for a save by
// several ranks, assembled from their model.rank-<r>-of-<W>.tensors pieces.
#pragma once
#include <memory>
#include <string>

#include "model/qwen3.h"

namespace titan {

// `dir` is a step-N folder, or a checkpoint folder (its latest step is used).
std::unique_ptr<Qwen3Model> load_checkpoint_model(const std::string& dir, int64_t* step = nullptr);

// True when `dir` looks like an HF folder (has config.json) rather than a training checkpoint.
bool is_hf_folder(const std::string& dir);

}  // namespace titan
