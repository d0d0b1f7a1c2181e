// One ParamSpec per parameter of the decoder, declared in one place (model_param_specs): its HF
// name and shape, the parameter unit it belongs to (the granularity of sharded data
// parallelism), its role (which decides the dtype it is stored in), its initialisation, and its
// placement on the mesh (tensor-parallel dim, split by expert). The model, the FSDP planner, the
// checkpoint and state-dict code read these fields instead of parsing names.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace titan {

struct ModelConfig;

enum class ParamRole : uint8_t {
  Matmul,     // a linear's weight (q/k/v/o, MLP and expert projections, an untied lm_head): stored in
              // the model's weight dtype (bf16 for a frozen bf16 LoRA base), f32 otherwise
  Embedding,  // the token embedding (also the output layer when tied)
  Norm,       // RMSNorm weights
  Bias,       // q/k/v projection biases (Qwen2)
  Router,     // an MoE layer's router (mlp.gate.weight): f32, it picks the experts
  Mixer,      // a Gated DeltaNet layer's small f32 parameters: conv1d.weight, dt_bias, A_log
  Adapter,    // a LoRA adapter's lora_A or lora_B (model/lora.h: lora_param_specs): f32, trained on a
              // frozen base
};

// How init_weights fills a parameter (torchtitan's scheme; the HF scheme draws every non-norm,
// non-bias parameter from N(0, initializer_range)).
enum class InitKind : uint8_t {
  Ones,        // norms
  Zeros,       // biases
  Embedding,   // N(0, 1)
  Output,      // the output layer (lm_head, or the tied embedding): trunc_normal(dim^-0.5, +-3 std)
  InputSide,   // q/k/v, gate_proj, the router: trunc_normal(0.02, [-2, 2])
  OutputSide,  // o_proj, up_proj, down_proj: trunc_normal(0.02 / sqrt(2 (layer + 1)), [-2, 2])
  LogDecay,    // a Gated DeltaNet's A_log: log(uniform(0.01, 16)) (transformers' init, both schemes)
  LoraA,       // a LoRA adapter's lora_A: PEFT's kaiming_uniform_(a = sqrt(5)), U(-1/sqrt(in), 1/sqrt(in))
               // (its lora_B: Zeros)
};

// Where a parameter lives on the mesh. Tensor parallelism as Megatron lays it out: column-parallel
// linears (q/k/v, gate/up, lm_head) and the vocabulary of the embedding are split along dim 0
// (their output rows), row-parallel ones (o_proj, down_proj) along dim 1 (their input columns);
// -1: replicated over tp. A LoRA adapter is split like its base (model/lora.h, lora_param_specs):
// on a column-parallel linear its lora_B along dim 0 (lora_A replicated), on a row-parallel one
// its lora_A along dim 1 (lora_B replicated). by_expert: one of a stacked expert set, split over the ep group by
// expert. tp_segments: a fused tensor whose tp_dim is consecutive parts each split over tp (Qwen3.5's in_proj_qkv and
// conv1d: the q, k and v parts, tp_dim 0; model/tensor_parallel.h); empty: one part.
struct Placement {
  int tp_dim = -1;
  bool by_expert = false;
  std::vector<int64_t> tp_segments;
  bool replicated() const { return tp_dim < 0 && !by_expert; }
};

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t unit = 0;    // 0 the embedding, 1 + l decoder layer l, num_hidden_layers + 1 the rest
  int64_t layer = -1;  // decoder layer, -1 outside the layers
  ParamRole role = ParamRole::Norm;
  InitKind init = InitKind::Ones;
  Placement placement;
  int64_t expert = -1;  // placement.by_expert: which expert of its layer's stacked set
  // The dtype the parameter is stored in when the matmul weights are `weight_dtype`.
  DType dtype(DType weight_dtype) const { return role == ParamRole::Matmul ? weight_dtype : DType::F32; }
  // Its shape on one rank of a tensor-parallel group of `tp` ranks (the sharded dim / tp; the
  // caller has checked divisibility, comm/parallel_dims.h).
  std::vector<int64_t> local_shape(int64_t tp) const;
};

// All parameters of Qwen3ForCausalLM / Qwen3MoeForCausalLM / LlamaForCausalLM /
// Qwen2ForCausalLM in HF naming, in module order (Qwen2: each of q/k/v_proj.weight followed by its
// .bias; Llama and Qwen2: no q_norm / k_norm). A tied model has no lm_head.weight entry (it is
// model.embed_tokens.weight). A sparse layer's MLP is mlp.gate.weight [E, H] and, per expert e,
// mlp.experts.e.{gate_proj,up_proj} [I, H] and mlp.experts.e.down_proj [H, I] (the per-expert
// layout; model/hf_checkpoint.h reads the fused one). Units are contiguous in this order.
std::vector<ParamSpec> model_param_specs(const ModelConfig& c);
// The parameters one rank of an expert-parallel group of `ep` ranks holds (model/expert_parallel.h):
// every parameter but the experts, and of each sparse layer's experts those of this rank,
// [ep_rank E/ep, (ep_rank + 1) E/ep), in model_param_specs order (ep = 1: all of them).
std::vector<ParamSpec> local_param_specs(const ModelConfig& c, int64_t ep, int64_t ep_rank);
// Number of parameters (sum over model_param_specs: a tied embedding counts once).
int64_t model_param_count(const ModelConfig& c);

const char* param_role_name(ParamRole r);
const char* init_kind_name(InitKind k);

}  // namespace titan
