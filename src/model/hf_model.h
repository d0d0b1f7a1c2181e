// Bridges between the model and Hugging Face checkpoint folders.
#pragma once
#include <memory>
#include <string>

#include "model/hf_checkpoint.h"
#include "model/decoder.h"

namespace titan {

// Builds the model from an HF folder (config.json + safetensors) and copies the weights in.
// frozen / weight_dtype: as DecoderModel's constructor takes them; for inference (frozen: no
// gradient buffers; BF16: the matmul weights read from the files straight into bf16). A frozen
// model copies only what it must: a parameter that is one whole stored tensor, in the dtype the
// model holds it in, is a view of the mapped file (no copy; its pages are the page cache's), and
// the file pages a copy was taken from (fused q/k/v and gate/up, converted dtypes) are given
// back as soon as it is, so loading holds about one copy of the weights, not the file and a copy.
std::unique_ptr<DecoderModel> load_hf_model(const std::string& dir, const std::string& kernel_variant = default_variant(),
                                          bool frozen = false, DType weight_dtype = DType::F32);
// The same model with its matmul weights in weight_dtype (frozen; the values converted, the
// LoRA-free `src` unchanged): for a model that was loaded in f32 (a training checkpoint).
std::unique_ptr<DecoderModel> with_weight_dtype(const DecoderModel& src, DType weight_dtype);
// Copies every parameter of an opened checkpoint into the model (names and shapes checked);
// unit >= 0: only that parameter unit's (DecoderModel::unit_params).
void load_weights(DecoderModel& model, const HfCheckpoint& ckpt, int64_t unit = -1);
// name -> value for every HF parameter (views share the model's storage; no copy).
TensorMap model_state(const DecoderModel& model);
TensorMap model_grads(const DecoderModel& model);

}  // namespace titan
