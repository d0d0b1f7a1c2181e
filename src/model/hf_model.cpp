#include "model/hf_model.h"

namespace titan {

std::unique_ptr<Qwen3Model> load_hf_model(const std::string& dir, const std::string& kernel_variant) {
  HfCheckpoint ckpt = HfCheckpoint::open(dir);
  auto model = std::make_unique<Qwen3Model>(ckpt.config(), kernel_variant);
  load_weights(*model, ckpt);
  return model;
}

void load_weights(Qwen3Model& model, const HfCheckpoint& ckpt) {
  for (auto& p : model.params().all()) ckpt.read_into(p.name, p.value);
}

TensorMap model_state(const Qwen3Model& model) {
  TensorMap m;
  for (auto& p : model.params().all()) m[p.name] = p.value;
  return m;
}

TensorMap model_grads(const Qwen3Model& model) {
  TensorMap m;
  for (auto& p : model.params().all()) m[p.name] = p.grad;
  return m;
}

}  // namespace titan
