#include "model/layer_kind.h"

namespace titan {

const char* mixer_kind_name(MixerKind k) {
  switch (k) {
    case MixerKind::Attention: return "attention";
    case MixerKind::GatedAttention: return "gated_attention";
    case MixerKind::GatedDeltaNet: return "gated_deltanet";
  }
  return "?";
}

const char* mlp_kind_name(MlpKind k) { return k == MlpKind::MoE ? "moe" : "dense"; }

const char* hf_layer_type(MixerKind k) {
  return k == MixerKind::GatedDeltaNet ? "linear_attention" : "full_attention";
}

std::string describe_layer(int64_t layer, const LayerKind& k) {
  return "layer " + std::to_string(layer) + ": " + mixer_kind_name(k.mixer) + " + " + mlp_kind_name(k.mlp);
}

}  // namespace titan
