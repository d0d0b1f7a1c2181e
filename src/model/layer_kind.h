// What each decoder layer is: a token mixer and an MLP, read from the config (HF `layer_types`
// where present, the MoE sparsity rule for the MLP). The decoder dispatches every per-layer step —
// parameters, saved activations, forward, backward, the cached (generation) step and the layer's
// slot of the inference state — on these kinds, each kind's code in its own file under
// model/layers/. A hybrid stack (Qwen3.5: three gated delta-net layers to one gated attention
// layer) is a list of kinds like any other.
#pragma once
#include <cstdint>
#include <string>

namespace titan {

enum class MixerKind : uint8_t {
  Attention,       // softmax attention, GQA, RoPE, optional q/k norm and q/k/v bias (Qwen3, Llama, Qwen2)
  GatedAttention,  // attention with a sigmoid output gate and partial RoPE (Qwen3.5's full layers)
  GatedDeltaNet,   // linear attention by the gated delta rule (Qwen3.5's linear layers)
};

enum class MlpKind : uint8_t {
  Dense,  // SwiGLU of intermediate_size
  MoE,    // routed SwiGLU experts (Qwen3-MoE)
};

struct LayerKind {
  MixerKind mixer = MixerKind::Attention;
  MlpKind mlp = MlpKind::Dense;
  bool operator==(const LayerKind&) const = default;
};

// "attention", "gated_attention", "gated_deltanet"; "dense", "moe".
const char* mixer_kind_name(MixerKind k);
const char* mlp_kind_name(MlpKind k);
// HF's layer_types entry of a mixer: "full_attention" (both attention kinds), "linear_attention".
const char* hf_layer_type(MixerKind k);
// "layer 3: gated_deltanet + moe"
std::string describe_layer(int64_t layer, const LayerKind& k);

}  // namespace titan
