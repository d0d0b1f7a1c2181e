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
  const Placement col{0, false}, row{1, false}, expert_col{0, true}, expert_row{1, true};
  // The tied embedding is also the output layer, whose init torchtitan writes last (it wins).
  add("model.embed_tokens.weight", {V, H}, 0, -1, ParamRole::Embedding,
      c.tie_word_embeddings ? InitKind::Output : InitKind::Embedding, col);
  for (int64_t i = 0; i < L; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const int64_t u = 1 + i;
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
      }
      continue;
    }
    add(p + "mlp.gate_proj.weight", {I, H}, u, i, ParamRole::Matmul, InitKind::InputSide, col);
    add(p + "mlp.up_proj.weight", {I, H}, u, i, ParamRole::Matmul, InitKind::OutputSide, col);
    add(p + "mlp.down_proj.weight", {H, I}, u, i, ParamRole::Matmul, InitKind::OutputSide, row);
  }
  add("model.norm.weight", {H}, L + 1, -1, ParamRole::Norm, InitKind::Ones);
  if (!c.tie_word_embeddings) add("lm_head.weight", {V, H}, L + 1, -1, ParamRole::Matmul, InitKind::Output, col);
  return specs;
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
  }
  return "?";
}

}  // namespace titan
