#include "model/param_spec.h"

#include "core/error.h"
#include "core/tensor.h"
#include "model/config.h"

namespace titan {

std::vector<int64_t> ParamSpec::local_shape(int64_t tp) const {
  std::vector<int64_t> s = shape;
  if (placement.tp_dim >= 0 && tp > 1) {
    const size_t d = size_t(placement.tp_dim);
    TITAN_CHECK(d < s.size() && s[d] % tp == 0, name, ": dim ", d, " of ", shape_str(shape),
                " does not split over ", tp, " tensor-parallel ranks");
    s[d] /= tp;
  }
  return s;
}

namespace {

// One Qwen3.5 decoder layer: input_layernorm; its mixer (self_attn: q_proj [2 Q, H] holding each
// head's query then its output gate, k/v/o_proj, q/k_norm; or linear_attn: in_proj_qkv/z/b/a, one
// fused buffer in the model, conv1d, dt_bias, A_log, the gated norm, out_proj);
// post_attention_layernorm; the MLP (dense, or the MoE router, experts, shared expert and its
// gate). Tensor placement (model/tensor_parallel.h): the Gated DeltaNet split by whole linear key
// heads and their value heads (in_proj_qkv and conv1d by rows of each of their q, k, v parts,
// in_proj_z/b/a, dt_bias, A_log by value head, out_proj by columns; the gated norm replicated),
// the gated attention by whole KV groups (q_proj's per-head query and gate rows), the dense MLP
// as Qwen3's, the routed experts as Qwen3-MoE's (each by its intermediate dim), the shared expert
// by its intermediate dim (its sigmoid gate and the router replicated).
void qwen3_5_layer_specs(const ModelConfig& c, int64_t i, std::vector<ParamSpec>& specs) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim, Q = c.q_dim(), KV = c.kv_dim();
  const std::string p = "model.layers." + std::to_string(i) + ".";
  const int64_t u = 1 + i;
  auto add = [&](std::string name, std::vector<int64_t> shape, ParamRole role, InitKind init, Placement pl = {}) {
    specs.push_back({std::move(name), std::move(shape), u, i, role, init, pl});
  };
  const Placement col{0, false, {}}, row{1, false, {}}, expert_col{0, true, {}}, expert_row{1, true, {}};
  add(p + "input_layernorm.weight", {H}, ParamRole::Norm, InitKind::Zeros);
  if (c.layer_kind(i).mixer == MixerKind::GatedDeltaNet) {
    const std::string a = p + "linear_attn.";
    const int64_t Hv = c.linear_num_value_heads, VD = c.linear_value_dim(), C = c.linear_conv_dim();
    const Placement qkv{0, false, {c.linear_key_dim(), c.linear_key_dim(), VD}};  // q, k, v rows
    add(a + "in_proj_qkv.weight", {C, H}, ParamRole::Matmul, InitKind::InputSide, qkv);
    add(a + "in_proj_z.weight", {VD, H}, ParamRole::Matmul, InitKind::InputSide, col);
    add(a + "in_proj_b.weight", {Hv, H}, ParamRole::Matmul, InitKind::InputSide, col);
    add(a + "in_proj_a.weight", {Hv, H}, ParamRole::Matmul, InitKind::InputSide, col);
    add(a + "conv1d.weight", {C, 1, c.linear_conv_kernel_dim}, ParamRole::Mixer, InitKind::InputSide, qkv);
    add(a + "dt_bias", {Hv}, ParamRole::Mixer, InitKind::Ones, col);
    add(a + "A_log", {Hv}, ParamRole::Mixer, InitKind::LogDecay, col);
    add(a + "norm.weight", {c.linear_value_head_dim}, ParamRole::Norm, InitKind::Ones);
    add(a + "out_proj.weight", {H, VD}, ParamRole::Matmul, InitKind::OutputSide, row);
  } else {
    const std::string a = p + "self_attn.";
    add(a + "q_proj.weight", {2 * Q, H}, ParamRole::Matmul, InitKind::InputSide, col);
    add(a + "k_proj.weight", {KV, H}, ParamRole::Matmul, InitKind::InputSide, col);
    add(a + "v_proj.weight", {KV, H}, ParamRole::Matmul, InitKind::InputSide, col);
    add(a + "o_proj.weight", {H, Q}, ParamRole::Matmul, InitKind::OutputSide, row);
    add(a + "q_norm.weight", {D}, ParamRole::Norm, InitKind::Zeros);
    add(a + "k_norm.weight", {D}, ParamRole::Norm, InitKind::Zeros);
  }
  add(p + "post_attention_layernorm.weight", {H}, ParamRole::Norm, InitKind::Zeros);
  if (c.layer_kind(i).mlp == MlpKind::MoE) {
    const int64_t E = c.num_experts, MI = c.moe_intermediate_size, SI = c.shared_expert_intermediate_size;
    add(p + "mlp.gate.weight", {E, H}, ParamRole::Router, InitKind::InputSide);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      add(x + "gate_proj.weight", {MI, H}, ParamRole::Matmul, InitKind::InputSide, expert_col);
      add(x + "up_proj.weight", {MI, H}, ParamRole::Matmul, InitKind::OutputSide, expert_col);
      add(x + "down_proj.weight", {H, MI}, ParamRole::Matmul, InitKind::OutputSide, expert_row);
      for (size_t k = specs.size() - 3; k < specs.size(); ++k) specs[k].expert = e;
    }
    if (c.has_shared_expert()) {
      add(p + "mlp.shared_expert.gate_proj.weight", {SI, H}, ParamRole::Matmul, InitKind::InputSide, col);
      add(p + "mlp.shared_expert.up_proj.weight", {SI, H}, ParamRole::Matmul, InitKind::OutputSide, col);
      add(p + "mlp.shared_expert.down_proj.weight", {H, SI}, ParamRole::Matmul, InitKind::OutputSide, row);
      add(p + "mlp.shared_expert_gate.weight", {1, H}, ParamRole::Router, InitKind::InputSide);
    }
    return;
  }
  add(p + "mlp.gate_proj.weight", {I, H}, ParamRole::Matmul, InitKind::InputSide, col);
  add(p + "mlp.up_proj.weight", {I, H}, ParamRole::Matmul, InitKind::OutputSide, col);
  add(p + "mlp.down_proj.weight", {H, I}, ParamRole::Matmul, InitKind::OutputSide, row);
}

}  // namespace

std::vector<ParamSpec> model_param_specs(const ModelConfig& c) {
  const int64_t V = c.vocab_size, H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const int64_t Q = c.q_dim(), KV = c.kv_dim(), L = c.num_hidden_layers;
  std::vector<ParamSpec> specs;
  auto add = [&](std::string name, std::vector<int64_t> shape, int64_t unit, int64_t layer, ParamRole role,
                 InitKind init, Placement pl = {}) {
    specs.push_back({std::move(name), std::move(shape), unit, layer, role, init, pl});
  };
  // Experts: one of a stacked set (by expert, for expert parallelism), and with tensor
  // parallelism split like a dense MLP's projections (gate/up by rows, down by columns).
  const Placement col{0, false, {}}, row{1, false, {}}, expert_col{0, true, {}}, expert_row{1, true, {}};
  // The tied embedding is also the output layer, whose init torchtitan writes last (it wins).
  add("model.embed_tokens.weight", {V, H}, 0, -1, ParamRole::Embedding,
      c.tie_word_embeddings ? InitKind::Output : InitKind::Embedding, col);
  // Qwen3.5's zero-centred RMSNorms (x^ (1 + w)) start at w = 0.
  const InitKind norm_init = c.zero_centered_norm() ? InitKind::Zeros : InitKind::Ones;
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const int64_t u = 1 + i;
    if (c.is_qwen3_5()) {
      qwen3_5_layer_specs(c, i, specs);
      continue;
    }
    add(p + "input_layernorm.weight", {H}, u, i, ParamRole::Norm, InitKind::Ones);
    const bool bias = c.has_qkv_bias();
    const char* proj[3] = {"q_proj", "k_proj", "v_proj"};
    const int64_t rows[3] = {Q, KV, KV};
    for (int j = 0; j < 3; ++j) {
      add(p + "self_attn." + proj[j] + ".weight", {rows[j], H}, u, i, ParamRole::Matmul, InitKind::InputSide, col);
      if (bias) add(p + "self_attn." + proj[j] + ".bias", {rows[j]}, u, i, ParamRole::Bias, InitKind::Zeros, col);
    }
    add(p + "self_attn.o_proj.weight", {H, Q}, u, i, ParamRole::Matmul, InitKind::OutputSide, row);
    if (c.has_qk_norm()) {
      add(p + "self_attn.q_norm.weight", {D}, u, i, ParamRole::Norm, InitKind::Ones);
      add(p + "self_attn.k_norm.weight", {D}, u, i, ParamRole::Norm, InitKind::Ones);
    }
    add(p + "post_attention_layernorm.weight", {H}, u, i, ParamRole::Norm, InitKind::Ones);
    if (c.layer_kind(i).mlp == MlpKind::MoE) {
      const int64_t E = c.num_experts, MI = c.moe_intermediate_size;
      add(p + "mlp.gate.weight", {E, H}, u, i, ParamRole::Router, InitKind::InputSide);
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        add(x + "gate_proj.weight", {MI, H}, u, i, ParamRole::Matmul, InitKind::InputSide, expert_col);
        add(x + "up_proj.weight", {MI, H}, u, i, ParamRole::Matmul, InitKind::OutputSide, expert_col);
        add(x + "down_proj.weight", {H, MI}, u, i, ParamRole::Matmul, InitKind::OutputSide, expert_row);
        for (size_t k = specs.size() - 3; k < specs.size(); ++k) specs[k].expert = e;
      }
      continue;
    }
    add(p + "mlp.gate_proj.weight", {I, H}, u, i, ParamRole::Matmul, InitKind::InputSide, col);
    add(p + "mlp.up_proj.weight", {I, H}, u, i, ParamRole::Matmul, InitKind::OutputSide, col);
    add(p + "mlp.down_proj.weight", {H, I}, u, i, ParamRole::Matmul, InitKind::OutputSide, row);
  }
  add("model.norm.weight", {H}, L + 1, -1, ParamRole::Norm, norm_init);
  if (!c.tie_word_embeddings) add("lm_head.weight", {V, H}, L + 1, -1, ParamRole::Matmul, InitKind::Output, col);
  return specs;
}

std::vector<ParamSpec> local_param_specs(const ModelConfig& c, int64_t ep, int64_t ep_rank) {
  std::vector<ParamSpec> all = model_param_specs(c);
  if (ep <= 1) return all;
  const int64_t El = c.num_experts / ep, e0 = ep_rank * El;
  std::vector<ParamSpec> mine;
  for (ParamSpec& s : all)
    if (s.expert < 0 || (s.expert >= e0 && s.expert < e0 + El)) mine.push_back(std::move(s));
  return mine;
}

int64_t model_param_count(const ModelConfig& c) {
  int64_t n = 0;
  for (const auto& s : model_param_specs(c)) n += shape_numel(s.shape);
  return n;
}

const char* param_role_name(ParamRole r) {
  switch (r) {
    case ParamRole::Matmul: return "matmul";
    case ParamRole::Embedding: return "embedding";
    case ParamRole::Norm: return "norm";
    case ParamRole::Bias: return "bias";
    case ParamRole::Router: return "router";
    case ParamRole::Mixer: return "mixer";
    case ParamRole::Adapter: return "adapter";
  }
  return "?";
}

const char* init_kind_name(InitKind k) {
  switch (k) {
    case InitKind::Ones: return "ones";
    case InitKind::Zeros: return "zeros";
    case InitKind::Embedding: return "embedding";
    case InitKind::Output: return "output";
    case InitKind::InputSide: return "input_side";
    case InitKind::OutputSide: return "output_side";
    case InitKind::LogDecay: return "log_decay";
    case InitKind::LoraA: return "lora_a";
  }
  return "?";
}

}  // namespace titan
