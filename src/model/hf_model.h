// Bridges between the model and Hugging Face checkpoint folders.
#pragma once
#include <memory>
#include <string>

#include "model/hf_checkpoint.h"
#include "model/qwen3.h"

namespace titan {

// Builds the model from an HF folder (config.json + safetensors) and copies the weights in.
std::unique_ptr<Qwen3Model> load_hf_model(const std::string& dir, const std::string& kernel_variant = "cpu");
// Copies every parameter of an opened checkpoint into the model (names and shapes checked);
// unit >= 0: only that parameter unit's (Qwen3Model::unit_params).
void load_weights(Qwen3Model& model, const HfCheckpoint& ckpt, int64_t unit = -1);
// name -> value for every HF parameter (views share the model's storage; no copy).
TensorMap model_state(const Qwen3Model& model);
TensorMap model_grads(const Qwen3Model& model);

}  // namespace titan
