// Softmax cross-entropy over a chunk of logit rows (the fused lm_head + cross-entropy,
// ops/cross_entropy/cross_entropy.h; the GEMMs around it are blas_gemm calls, ce_variant.cpp):
// one block per row; max and sum of exponentials by block reductions; the row's loss
// lse - z[label] written per row (summed on the host in double, in row order); for the backward
// the row is overwritten by grad_scale * (softmax - onehot(label)), or written as bf16 bits.
// Ignored rows (label -100): loss 0 and a zero gradient. Included by exactly one translation unit.
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

constexpr int kCeThreads = 256;

template <int kThreads>
__global__ void ce_rows_kernel(float* z, int64_t v, const int64_t* l64, const int32_t* l32, int64_t row0, float* loss,
                               bool backward, float grad_scale, uint16_t* z_bf16) {
  TITAN_SHARED(float, scratch, 32);
  const int64_t r = blockIdx.x;
  float* zr = z + r * v;
  const int64_t label = l64 ? l64[row0 + r] : int64_t(l32[row0 + r]);
  if (label == -100) {  // the whole block takes this branch
    if (threadIdx.x == 0) loss[r] = 0.0f;
    if (backward)
      for (int64_t j = threadIdx.x; j < v; j += kThreads) {
        if (z_bf16)
          z_bf16[r * v + j] = 0;
        else
          zr[j] = 0.0f;
      }
    return;
  }
  const float z_label = zr[label];  // read by every thread before the reductions' barriers
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += kThreads) m = fmaxf(m, zr[j]);
  m = block_max<kThreads>(m, scratch);
  float s = 0;
  for (int64_t j = threadIdx.x; j < v; j += kThreads) s += expf(zr[j] - m);
  s = block_sum<kThreads>(s, scratch);
  const float lse = m + logf(s);
  if (threadIdx.x == 0) loss[r] = lse - z_label;
  if (!backward) return;
  for (int64_t j = threadIdx.x; j < v; j += kThreads) {
    const float g = grad_scale * (expf(zr[j] - lse) - (j == label ? 1.0f : 0.0f));
    if (z_bf16)
      z_bf16[r * v + j] = to_bf16(g);
    else
      zr[j] = g;
  }
}

__global__ void round_bf16_kernel(const float* src, uint16_t* dst, int64_t count) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e < count) dst[e] = to_bf16(src[e]);
}

void ce_rows(float* z, int64_t rows, int64_t v, const int64_t* l64, const int32_t* l32, int64_t row0, float* loss,
             bool backward, float grad_scale, uint16_t* z_bf16, void* stream) {
  if (rows == 0) return;
  TITAN_LAUNCH(ce_rows_kernel<kCeThreads>, dim3(unsigned(rows)), dim3(kCeThreads), 0, static_cast<gpu::Stream>(stream),
               z, v, l64, l32, row0, loss, backward, grad_scale, z_bf16);
}

void round_bf16(const float* src, uint16_t* dst, int64_t count, void* stream) {
  if (count == 0) return;
  TITAN_LAUNCH(round_bf16_kernel, dim3(unsigned((count + 255) / 256)), dim3(256), 0, static_cast<gpu::Stream>(stream),
               src, dst, count);
}

}  // namespace titan::cuda_kernels
