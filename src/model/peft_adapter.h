// PEFT LoRA adapter folders (what peft.PeftModel.save_pretrained writes and from_pretrained reads):
//   adapter_config.json          peft_type "LORA", r, lora_alpha, lora_dropout, use_rslora,
//                                target_modules, base_model_name_or_path, task_type "CAUSAL_LM", ...
//   adapter_model.safetensors    base_model.model.<module>.lora_A.weight [r, in] and
//                                ...lora_B.weight [out, r] (no adapter name), f32 here
// MoE parameters (target_parameters, PEFT's ParamWrapper; model/lora.h has the math) are named by
// PEFT's wrapper modules: mlp.gate.lora_A.weight [r, H] / lora_B [E, r] for the router,
// mlp.experts.lora_A.weight [E*r, in] / lora_B [out, r*E] for the experts' outermost wrapper and
// mlp.experts.base_layer.lora_* for the one inside it (with both gate_up_proj and down_proj
// targeted, gate_up_proj is the inner one). adapter_config.json lists them in target_parameters
// (full names; read with PEFT's rule: an entry matches a name equal to it or ending in "." + it).
// Variants this engine does not compute (DoRA, rank or alpha patterns, biases, fan_in_fan_out,
// modules_to_save, other PEFT types) are refused with a one-line error naming the file.
#pragma once
#include <string>

#include "model/decoder.h"

namespace titan {

struct PeftAdapterConfig {
  LoraConfig lora;              // target_modules: the exact module names found in the weights file;
                                // target_parameters: the exact parameter names the config targets
  std::string base_model;       // base_model_name_or_path (informative)
};

// Reads and validates dir/adapter_config.json and the module list of dir/adapter_model.safetensors.
PeftAdapterConfig read_peft_adapter_config(const std::string& dir, const ModelConfig& base);

// Enables LoRA on `model` (which must not have adapters yet) as the folder describes and copies
// its adapter weights in (names, shapes checked; any float dtype converted to f32).
void load_peft_adapter(DecoderModel& model, const std::string& dir);

// Writes the model's adapters as a PEFT folder (atomically per file; dir created when missing).
void save_peft_adapter(const DecoderModel& model, const std::string& dir, const std::string& base_model);

}  // namespace titan
