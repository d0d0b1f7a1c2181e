// RoPE kernels (math: ops/rope/rope.h), in place on a row view of token rows of h heads: one
// thread per (row, head, j < D/2) pair (j, j + D/2); sign -1 applies the transposed rotation (the
// backward). Included by exactly one translation unit per build.
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

__global__ void rope_kernel(float* x, Rows xr, int64_t rows, int64_t seq, int64_t start, const float* cos_cache,
                            const float* sin_cache, float sign) {
  const int64_t half = xr.d / 2;
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= rows * xr.h * half) return;
  const int64_t j = e % half, vec = e / half;  // vec = row * h + head
  const int64_t pos = start + (vec / xr.h) % seq;
  float* v = vec_ptr(x, xr, vec);
  const float* c = cos_cache + pos * xr.d;
  const float* s = sin_cache + pos * xr.d;
  const float x1 = v[j], x2 = v[j + half];
  v[j] = x1 * c[j] - sign * x2 * s[j];
  v[j + half] = x2 * c[j + half] + sign * x1 * s[j + half];
}

void rope_rotate(float* x, Rows xr, int64_t rows, int64_t seq, int64_t start, const float* cos_cache,
                 const float* sin_cache, bool backward, void* stream) {
  const int64_t count = rows * xr.h * (xr.d / 2);
  if (count == 0) return;
  TITAN_LAUNCH(rope_kernel, dim3(unsigned((count + 255) / 256)), dim3(256), 0, static_cast<gpu::Stream>(stream), x,
               xr, rows, seq, start, cos_cache, sin_cache, backward ? -1.0f : 1.0f);
}

}  // namespace titan::cuda_kernels
