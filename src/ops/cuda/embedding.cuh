// Embedding kernels (math: ops/embedding/embedding.h). Included by exactly one translation unit
// per build. forward: one thread per output element. backward: one thread per column, adding the
// tokens' rows in token order, so repeated ids accumulate in the same order on every run (no
// float atomics; parallel over the hidden size only, which is enough for correctness checks and
// for H >= 1024 on a GPU).
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

__device__ __forceinline__ int64_t id_at(const int64_t* ids64, const int32_t* ids32, int64_t t) {
  return ids64 ? ids64[t] : int64_t(ids32[t]);
}

__global__ void embedding_fwd_kernel(const int64_t* ids64, const int32_t* ids32, const float* w, float* out, int64_t n,
                                     int64_t h) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * h) return;
  const int64_t t = e / h, c = e % h;
  out[e] = w[id_at(ids64, ids32, t) * h + c];
}

__global__ void embedding_bwd_kernel(const int64_t* ids64, const int32_t* ids32, const float* dout, float* dw,
                                     int64_t n, int64_t h) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= h) return;
  for (int64_t t = 0; t < n; ++t) dw[id_at(ids64, ids32, t) * h + c] += dout[t * h + c];
}

void embedding_forward(const int64_t* ids64, const int32_t* ids32, const float* w, float* out, int64_t n, int64_t h,
                       void* stream) {
  if (n * h == 0) return;
  TITAN_LAUNCH(embedding_fwd_kernel, dim3(unsigned((n * h + 255) / 256)), dim3(256), 0,
               static_cast<gpu::Stream>(stream), ids64, ids32, w, out, n, h);
}

void embedding_backward(const int64_t* ids64, const int32_t* ids32, const float* dout, float* dw, int64_t n, int64_t h,
                        void* stream) {
  if (n * h == 0) return;
  TITAN_LAUNCH(embedding_bwd_kernel, dim3(unsigned((h + 127) / 128)), dim3(128), 0, static_cast<gpu::Stream>(stream),
               ids64, ids32, dout, dw, n, h);
}

}  // namespace titan::cuda_kernels
