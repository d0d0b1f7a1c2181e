// Predicted peak memory of one training step (what the allocator's peak counts: tensors, plus the
// heap a kernel keeps beside them: `heap`), for `titan info` and the LoRA memory benchmark. Every
// model family on one process: the attention families (Qwen3, Llama, Qwen2), Qwen3.5 (its Gated
// DeltaNet and gated attention layers save their own tensors, model/layers/) and the MoE models
// (Qwen3-MoE with any mix of dense and sparse layers, Qwen3.5-MoE with its shared expert: the
// grouped-GEMM variant's routing, expert-ordered rows and activations, ops/moe/); the parts:
//   weights    f32 parameters (and LoRA adapters), and the RoPE tables; with a bf16 base (LoRA's
//              base_dtype) the matmul weights (q/k/v/o or the delta net's projections, the MLP,
//              experts and shared expert, an untied lm_head) at 2 bytes
//   grads      f32 gradients of what is trained (every parameter, or only the adapters with the
//              base frozen)
//   optimizer  AdamW exp_avg + exp_avg_sq of what is trained
//   activations  what the forward keeps for the backward at its largest point: each layer's input
//              x [T, H] and, by the checkpointing mode, the saved tensors of model/decoder_layer.h
//              (LayerActs, LoRA's x A^T [T, r] per adapter included), plus the largest working set
//              on top of them (the head's fused lm_head + cross-entropy chunk, or one layer's
//              backward and recomputation buffers, with LoRA dropout the largest adapter input's
//              dropped copy and its gradient), plus the bf16 weight copies of a bf16 step and the
//              auxiliary loss's router-logit gradients.
// Parts: model/train_memory.cpp (this API, the attention families, the timeline),
// train_memory_qwen3_5.cpp (Qwen3.5's mixers), train_memory_moe.cpp (the MoE block, LoRA's sizes).
// LoRA on MoE parameters (target_parameters, merged into a weight copy every pass) is refused.
// The formula follows the buffers the code allocates; tests/unit/model/test_train_memory.cpp
// holds it to the allocator's measured peak.
//
// train_step_timeline gives one rank's activations under tensor and context parallelism from the
// same sizes, compute step by compute step, for distributed/step_memory.h to add the FSDP state
// and gathered units of that moment (tests/cli/dist_step_memory.sh: against the measured peak).
#pragma once
#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/lora.h"
#include "model/unit_schedule.h"

namespace titan {

struct TrainMemory {
  int64_t weights = 0, grads = 0, optimizer = 0, activations = 0;
  // Parts of the above: the RoPE tables (weights) and the whole model's per-step bf16 copies of
  // its f32 linear weights (activations), which a sharded rank holds only for its gathered layers.
  int64_t rope = 0, weight_copies = 0;
  // Part of activations held outside the tensor allocator (so not in its peak): Qwen3.5's delta
  // rule keeps its backward's normalised q/k, per-value-head dq/dk and chunk states on the heap.
  int64_t heap = 0;
  int64_t total() const { return weights + grads + optimizer + activations; }
};

// lora: null for full fine-tuning; else the adapters lora_select(cfg, *lora) picks, base frozen.
// base: the dtype of the frozen base's matmul weights (DecoderModel's weight_dtype; BF16 needs lora
// and compute BF16): a bf16 base is read as it is, no per-step bf16 copies.
TrainMemory predict_train_memory(const ModelConfig& cfg, int64_t batch, int64_t seq, Checkpointing ckpt, DType compute,
                                 const LoraConfig* lora, DType base = DType::F32);

// One rank's share of a step's tensors under tensor and context parallelism:
//   tp  local heads, KV heads, ffn and vocabulary 1/tp (model/tensor_parallel.h); with sequence
//       parallelism the residual stream, the norms and the layer inputs on T/tp rows, the normed
//       rows all-gathered into [T, H] before each column-parallel block and the row-parallel
//       blocks' [T, H] partial sums reduce-scattered; the head's logits over the vocabulary shard,
//       in row chunks of 64 MiB;
//   cp  S/cp tokens of every sequence (model/context_parallel.h); each attention call all-gathers
//       K and V into whole sequences [B, S, kv, D] (forward, and again in the backward), whose
//       backward builds whole-sequence dK and dV and a rank-major copy of each for the
//       reduce-scatter. The largest rank is one whose chunks end at S (with either balancer).
struct StepLayout {
  int64_t tp = 1;
  bool sequence_parallel = true;
  int64_t cp = 1;
  bool head_tail = true;  // cp's load balancer: two chunks of S / (2 cp) per rank, else one of S / cp
};

// One rank's activation bytes (everything of a training pass but parameters, their gradients and
// optimizer state) at each compute step of its pass: the Run steps of
// unit_schedule(cfg, Pass::Train, ckpt) in order, each at its largest point: what the forward has
// kept so far (model/decoder_layer.h's LayerActs by the checkpointing mode) plus that step's
// working set (a layer's forward transients, the head's, a layer's recomputation and backward).
// With bf16 GEMMs, `weight_copies` is the bf16 copy of the running layer's linear weights (FSDP
// rounds each layer when its values arrive and drops the copy when it is done). Dense attention
// models (Qwen3, Llama, Qwen2; not MoE or Qwen3.5 yet), full fine-tuning; batch: the rank's rows,
// seq: the whole sequence.
// Rows of one document each: with packed documents the attention backward runs per document and its
// per-key-range dQ buffers are sized by the documents instead (not modelled; a few percent at most).
struct StepTimeline {
  std::vector<UnitStep> runs;
  std::vector<int64_t> activations, weight_copies;
  int64_t rope = 0;  // the RoPE tables the rank's model keeps (positions up to the whole sequence)
};
StepTimeline train_step_timeline(const ModelConfig& cfg, int64_t batch, int64_t seq, Checkpointing ckpt, DType compute,
                                 const StepLayout& layout);

}  // namespace titan
