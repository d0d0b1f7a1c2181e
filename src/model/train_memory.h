// Predicted peak memory of one training step (what the allocator's peak counts: tensors, plus the
// heap a kernel keeps beside them: `heap`), for `titan info` and the LoRA memory benchmark. Dense
// models (Qwen3, Llama, Qwen2 and dense Qwen3.5, whose Gated DeltaNet and gated attention layers
// save their own tensors, model/layers/) on one process; the parts:
//   weights    f32 parameters (and LoRA adapters), and the RoPE tables; with a bf16 base (LoRA's
//              base_dtype) the matmul weights (q/k/v/o, MLP, an untied lm_head) at 2 bytes
//   grads      f32 gradients of what is trained (every parameter, or only the adapters with the
//              base frozen)
//   optimizer  AdamW exp_avg + exp_avg_sq of what is trained
//   activations  what the forward keeps for the backward at its largest point: each layer's input
//              x [T, H] and, by the checkpointing mode, the saved tensors of model/decoder_layer.h
//              (LayerActs, LoRA's x A^T [T, r] per adapter included), plus the largest working set
//              on top of them (the head's fused lm_head + cross-entropy chunk, or one layer's
//              backward and recomputation buffers, with LoRA dropout the largest adapter input's
//              dropped copy and its gradient), plus the bf16 weight copies of a bf16 step.
// The formula follows the buffers the code allocates; tests/unit/model/test_train_memory.cpp
// holds it to the allocator's measured peak.
#pragma once
#include <cstdint>

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

}  // namespace titan
