// The kernel variants one module computes with. A model is built with one kernel set for its
// device (every op's variant of one name on that device: "reference", or the device's own,
// default_variant() of ops/registry.h); per-module replacement by name pattern swaps single entries.
#pragma once
#include <string>
#include <vector>

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

// Every op's `variant` on `dev`; refuses, in one line, a set some op has no kernel of (naming them
// and the sets the device has). The MoE op has no variant of the CPU's own name: that set uses
// moe.grouped_gemm.
KernelSet kernel_set(const std::string& variant, DeviceType dev = DeviceType::CPU);
// The sets complete on `dev` (every op has the variant), sorted.
std::vector<std::string> kernel_sets(DeviceType dev = DeviceType::CPU);

}  // namespace titan
