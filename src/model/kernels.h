// The kernel variants one module computes with. A model is built with one variant set
// ("reference" or "cpu"); per-module replacement by name pattern swaps single entries.
#pragma once
#include <string>

#include "ops/attention/attention.h"
#include "ops/bias/bias.h"
#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/gated_delta/gated_delta.h"
#include "ops/gated_rmsnorm/gated_rmsnorm.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/embedding/embedding.h"
#include "ops/matmul/matmul.h"
#include "ops/moe/moe.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/swiglu/swiglu.h"

namespace titan {

struct KernelSet {
  const EmbeddingKernel* embedding = nullptr;
  const LinearKernel* linear = nullptr;
  const RMSNormKernel* rmsnorm = nullptr;
  const RopeKernel* rope = nullptr;
  const AttentionKernel* attention = nullptr;
  const SwiGLUKernel* swiglu = nullptr;
  const ResidualKernel* residual = nullptr;
  const BiasKernel* bias = nullptr;  // q/k/v projection biases (qwen2)
  const CrossEntropyKernel* cross_entropy = nullptr;
  const MoEKernel* moe = nullptr;  // sparse MLP blocks (qwen3_moe)
  // Qwen3.5's Gated DeltaNet layers (docs/qwen3_5.md)
  const GatedDeltaKernel* gated_delta = nullptr;
  const CausalConv1dKernel* conv1d = nullptr;
  const GatedRMSNormKernel* gated_rmsnorm = nullptr;
};

// All ops from one variant set; error if any op lacks that variant. The MoE op has no "cpu"
// variant: the "cpu" set uses moe.grouped_gemm, the "reference" set moe.reference.
KernelSet kernel_set(const std::string& variant);

}  // namespace titan
