// AdamW kernel (math: ops/adamw/adamw.h), one thread per element, f32 parameters and moments;
// the decay factor and the bias corrections come from the host (computed in double). Included by exactly one
// translation unit per build.
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t count, float beta1, float beta2,
                             float eps, float decay, float step_size, float inv_sqrt_bc2) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= count) return;
  const float gi = g[e];
  const float mi = beta1 * m[e] + (1.0f - beta1) * gi;
  const float vi = beta2 * v[e] + (1.0f - beta2) * gi * gi;
  m[e] = mi, v[e] = vi;
  const float pi = p[e] * decay;
  p[e] = pi - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
}

void adamw_step(float* p, const float* g, float* m, float* v, int64_t count, float beta1, float beta2, float eps,
                float decay, float step_size, float inv_sqrt_bc2, void* stream) {
  if (count == 0) return;
  TITAN_LAUNCH(adamw_kernel, dim3(unsigned((count + 255) / 256)), dim3(256), 0, static_cast<gpu::Stream>(stream), p, g,
               m, v, count, beta1, beta2, eps, decay, step_size, inv_sqrt_bc2);
}

}  // namespace titan::cuda_kernels
