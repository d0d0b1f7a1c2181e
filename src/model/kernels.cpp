#include "model/kernels.h"

namespace titan {

KernelSet kernel_set(const std::string& variant) {
  TITAN_CHECK(variant == "reference" || variant == "cpu", "unknown kernel set '", variant,
              "' (expected reference or cpu)");
  KernelSet k;
  k.embedding = &kernel<EmbeddingKernel>(variant);
  k.linear = &kernel<LinearKernel>(variant);
  k.rmsnorm = &kernel<RMSNormKernel>(variant);
  k.rope = &kernel<RopeKernel>(variant);
  k.attention = &kernel<AttentionKernel>(variant);
  k.swiglu = &kernel<SwiGLUKernel>(variant);
  k.residual = &kernel<ResidualKernel>(variant);
  k.bias = &kernel<BiasKernel>(variant);
  k.cross_entropy = &kernel<CrossEntropyKernel>(variant);
  k.gated_delta = &kernel<GatedDeltaKernel>(variant);
  k.conv1d = &kernel<CausalConv1dKernel>(variant);
  k.gated_rmsnorm = &kernel<GatedRMSNormKernel>(variant);
  k.moe = &kernel<MoEKernel>(variant == "cpu" ? "grouped_gemm" : "reference");
  return k;
}

}  // namespace titan
