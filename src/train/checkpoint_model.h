// A model straight from a training checkpoint folder (step-N/, as CheckpointManager writes it):
// the model config recorded in its state.json, the weights from model.tensors or, for a save by
// several ranks, assembled from their model.rank-<r>-of-<W>.tensors pieces.
#pragma once
#include <memory>
#include <string>

#include "model/hf_checkpoint.h"
#include "model/decoder.h"

namespace titan {

// `dir` is a step-N folder, or a checkpoint folder (its latest step is used). A LoRA run's
// checkpoint (state.json extra "lora") gives its base HF folder with the adapters on it
// (lora_base: that folder).
std::unique_ptr<DecoderModel> load_checkpoint_model(const std::string& dir, int64_t* step = nullptr,
                                                  std::string* lora_base = nullptr);

// True when `dir` looks like an HF folder (has config.json) rather than a training checkpoint.
bool is_hf_folder(const std::string& dir);

// Every parameter of `dir` (an HF folder, or a training checkpoint as load_checkpoint_model
// takes it) as f32 by HF name, with the model config. `model` owns the tensors of a training
// checkpoint (null for an HF folder).
struct FolderWeights {
  ModelConfig config;
  TensorMap tensors;
  std::unique_ptr<DecoderModel> model;
};
FolderWeights load_folder_weights(const std::string& dir);

}  // namespace titan
