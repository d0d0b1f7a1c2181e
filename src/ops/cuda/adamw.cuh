// AdamW kernels (math: ops/adamw/adamw.h), f32 parameters and moments; the decay factor and the
// bias corrections come from the host (computed in double). Included by exactly one translation
// unit per build.
//   adamw_kernel: one tensor, one thread per element.
//   adamw_multi_kernel: a list of tensors in one launch: a device table of {p, g, m, v, numel} and
//     one (tensor, first element) entry per block, each block updating kAdamWChunk elements of one
//     tensor. Both apply adamw_update to an element, so the list form gives the per-tensor bits.
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

constexpr int kAdamWThreads = 256;
constexpr int64_t kAdamWChunk = 4 * kAdamWThreads;  // elements per block of the list form

__device__ __forceinline__ void adamw_update(float* p, const float* g, float* m, float* v, int64_t e, float beta1,
                                             float beta2, float eps, float decay, float step_size, float inv_sqrt_bc2) {
  const float gi = g[e];
  const float mi = beta1 * m[e] + (1.0f - beta1) * gi;
  const float vi = beta2 * v[e] + (1.0f - beta2) * gi * gi;
  m[e] = mi, v[e] = vi;
  const float pi = p[e] * decay;
  p[e] = pi - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, int64_t count, float beta1, float beta2,
                             float eps, float decay, float step_size, float inv_sqrt_bc2) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= count) return;
  adamw_update(p, g, m, v, e, beta1, beta2, eps, decay, step_size, inv_sqrt_bc2);
}

__global__ void adamw_multi_kernel(const AdamWTensor* tensors, const AdamWChunk* chunks, float beta1, float beta2,
                                   float eps, float decay, float step_size, float inv_sqrt_bc2) {
  const AdamWChunk c = chunks[blockIdx.x];
  const AdamWTensor t = tensors[c.tensor];
  const int64_t end = c.start + kAdamWChunk < t.numel ? c.start + kAdamWChunk : t.numel;
  for (int64_t e = c.start + threadIdx.x; e < end; e += kAdamWThreads)
    adamw_update(t.p, t.g, t.m, t.v, e, beta1, beta2, eps, decay, step_size, inv_sqrt_bc2);
}

void adamw_step(float* p, const float* g, float* m, float* v, int64_t count, float beta1, float beta2, float eps,
                float decay, float step_size, float inv_sqrt_bc2, void* stream) {
  if (count == 0) return;
  TITAN_LAUNCH(adamw_kernel, dim3(unsigned((count + kAdamWThreads - 1) / kAdamWThreads)), dim3(kAdamWThreads), 0,
               static_cast<gpu::Stream>(stream), p, g, m, v, count, beta1, beta2, eps, decay, step_size, inv_sqrt_bc2);
}

int64_t adamw_multi_chunk() { return kAdamWChunk; }

void adamw_multi_step(const AdamWTensor* tensors, const AdamWChunk* chunks, int64_t n_chunks, float beta1, float beta2,
                      float eps, float decay, float step_size, float inv_sqrt_bc2, void* stream) {
  if (n_chunks == 0) return;
  TITAN_LAUNCH(adamw_multi_kernel, dim3(unsigned(n_chunks)), dim3(kAdamWThreads), 0, static_cast<gpu::Stream>(stream),
               tensors, chunks, beta1, beta2, eps, decay, step_size, inv_sqrt_bc2);
}

}  // namespace titan::cuda_kernels
