// Gated RMSNorm, as Qwen3.5's Qwen3_5RMSNormGated (the Gated DeltaNet output norm, z gate):
//   x, z: [N, D] f32, w: [D];  r = 1 / sqrt(mean(x^2) + eps),  y = w * (x r) * silu(z)
// Backward: dx, dz (overwritten), dw += (accumulated; undefined: frozen):
//   n = dy silu(z) w,  dx = r (n - x^ mean(n x^)),  dz = dy w x^ silu'(z),  dw += sum_n dy silu(z) x^
// The family's zero-centred RMSNorm (x^ (1 + w)) is the plain rmsnorm op with weight 1 + w (its
// weight gradient is the same), so it needs no op of its own.
#pragma once
#include "core/exec_context.h"
#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct GatedRMSNormKernel {
  static constexpr const char* op_name = "gated_rmsnorm";
  const char* variant;
  void (*forward)(const ExecContext& ctx, const Tensor& x, const Tensor& z, const Tensor& w, float eps, Tensor& y);
  void (*backward)(const ExecContext& ctx, const Tensor& x, const Tensor& z, const Tensor& w, float eps,
                   const Tensor& dy, Tensor& dx, Tensor& dz, Tensor& dw);
};

namespace gated_rmsnorm {
// Checks x, z, y (or dy, dx, dz) are f32 [..., D] of one shape with D = w.numel(); returns N.
int64_t check(const Tensor& x, const Tensor& z, const Tensor& w, std::initializer_list<const Tensor*> same,
              const char* who);
}  // namespace gated_rmsnorm
}  // namespace titan
