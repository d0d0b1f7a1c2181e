// Residual add and bias kernels (ops/residual/residual.h, ops/bias/bias.h). Included by exactly
// one translation unit per build. The bias gradient sums each column over the rows in row order
// (one thread per column: the same bits on every run).
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

__global__ void add_kernel(const float* a, const float* b, float* y, int64_t count) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < count) y[e] = a[e] + b[e];
}

__global__ void bias_fwd_kernel(float* y, const float* b, int64_t m, int64_t n) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < m * n) y[e] += b[e % n];
}

__global__ void bias_bwd_kernel(const float* dy, float* db, int64_t m, int64_t n) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= n) return;
  float s = 0;
  for (int64_t r = 0; r < m; ++r) s += dy[r * n + c];
  db[c] += s;
}

void add(const float* a, const float* b, float* y, int64_t count, void* stream) {
  if (count == 0) return;
  TITAN_LAUNCH(add_kernel, dim3(unsigned((count + 255) / 256)), dim3(256), 0, static_cast<gpu::Stream>(stream), a, b,
               y, count);
}

void bias_forward(float* y, const float* b, int64_t m, int64_t n, void* stream) {
  if (m * n == 0) return;
  TITAN_LAUNCH(bias_fwd_kernel, dim3(unsigned((m * n + 255) / 256)), dim3(256), 0, static_cast<gpu::Stream>(stream), y,
               b, m, n);
}

void bias_backward(const float* dy, float* db, int64_t m, int64_t n, void* stream) {
  if (n == 0) return;
  TITAN_LAUNCH(bias_bwd_kernel, dim3(unsigned((n + 127) / 128)), dim3(128), 0, static_cast<gpu::Stream>(stream), dy, db,
               m, n);
}

}  // namespace titan::cuda_kernels
