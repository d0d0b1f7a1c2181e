// The MoE MLP block's and the LoRA adapters' parts of the step memory prediction
// (model/train_memory_parts.h).
#include <algorithm>

#include "model/train_memory_parts.h"
#include "ops/moe/expert_ffn.h"

namespace titan::train_memory_detail {

MlpSizes moe_mlp_sizes(const ModelConfig& c, int64_t T, DType compute, bool trained, DType base) {
  const int64_t H = c.hidden_size, E = c.num_experts, K = c.num_experts_per_tok, I = c.moe_intermediate_size;
  const int64_t SI = c.has_shared_expert() ? c.shared_expert_intermediate_size : 0;
  const bool bf16 = compute == DType::BF16;
  // The T K (token, k) slots in expert order, each expert's rows padded to kExpertRowAlign: at
  // most T K + E (kExpertRowAlign - 1) rows (the routing decides how many; this is the bound).
  const int64_t G = T * K + E * (kExpertRowAlign - 1);
  MlpSizes m;
  // Saved (MoESaved): the router logits [T, E], top-k experts and weights [T, K], the tokens per
  // expert [E] i64, each slot's row [T K] i32, and the experts' gate/up pre-activations [G, 2I].
  const int64_t routing = T * E * 4 + 3 * T * K * 4 + E * 8;
  const int64_t acts = G * 2 * I * 4;
  // The shared expert (qwen3_5_moe): its gate/up output [T, 2 SI], act [T, SI], sigmoid gate [T].
  const int64_t shared = SI ? T * 2 * SI * 4 + T * SI * 4 + T * 4 : 0;
  // xn2 stays f32 in a sparse layer (the router reads it), and its rstd.
  m.saved = T * H * 4 + T * 4 + routing + acts + shared;
  m.freed = routing + acts + shared;
  // Backward (grouped_gemm.cpp, expert_ffn_backward): dy in expert order [G, H] and, when the
  // experts train, x in expert order [G, H]; inside the expert FFN act [G, I] again, dA [G, I],
  // dgu [G, 2I], and in bf16 their bf16 roundings (act, dy, dgu) and, when the experts train, the
  // rounding of the weighted dy for ddown or of x for dgate_up (one at a time beside the others).
  const int64_t experts = G * H * 4 + (trained ? G * H * 4 : 0) + G * I * 4 + G * I * 4 + G * 2 * I * 4 +
                          (bf16 ? G * I * 2 + G * H * 2 + G * 2 * I * 2 + (trained ? G * H * 2 : 0) : 0);
  // Then the shared expert's backward (routing and acts still held): its down output [T, H] again,
  // d(out) [T, H] and d(gate logit) [T]; then d(act) [T, SI], d(gate/up) [T, 2 SI] and dx [T, H]
  // with, in bf16, the linear's bf16 operands: d(gate/up), then the f32 weight (unless a bf16
  // base stores it so) for dx or, when it trains, its input xn2 for the weight's gradient.
  int64_t shared_bwd = 0;
  if (SI) {
    const bool wcopy = bf16 && base != DType::BF16;
    const int64_t first = 2 * T * H * 4 + T * 4 + (bf16 ? T * SI * 2 : 0) + (wcopy ? H * SI * 2 : 0);
    const int64_t last = T * H * 4 + T * 4 + T * SI * 4 + T * 2 * SI * 4 + T * H * 4 +
                         (bf16 ? T * 2 * SI * 2 + std::max(wcopy ? 2 * SI * H * 2 : 0, trained ? T * H * 2 : 0) : 0);
    shared_bwd = std::max(first, last);
  }
  m.bwd = T * H * 4 + std::max(experts, shared_bwd);  // dxn2 beside either
  m.copies = E * 3 * I * H;                           // the stacked experts' gate/up and down (router: f32)
  return m;
}

LoraSizes lora_sizes(const ModelConfig& c, int64_t T, const LoraConfig* lora) {
  LoraSizes s;
  s.t_mix.assign(size_t(c.num_hidden_layers), 0);
  s.t_mlp.assign(size_t(c.num_hidden_layers), 0);
  if (!lora) return s;
  for (const LoraAdapter& a : lora_select(c, *lora)) {
    TITAN_CHECK(!a.is_parameter(), "memory prediction: LoRA on MoE parameters (", a.module,
                ", [lora] target_parameters: merged per pass) is not modelled");
    s.params += a.numel(lora->rank);
    if (lora->dropout > 0) s.drop = std::max(s.drop, 2 * T * a.in * 4);
    const bool mixer = a.group == LoraGroup::Qkv || a.group == LoraGroup::O;
    (mixer ? s.t_mix : s.t_mlp)[size_t(a.layer)] += T * lora->rank * 4;
  }
  return s;
}

}  // namespace titan::train_memory_detail
