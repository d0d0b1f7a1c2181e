// SwiGLU kernels (math: ops/swiglu/swiglu.h), one thread per (row, j) element pair of gate and
// up. Included by exactly one translation unit per build.
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

constexpr int kEltThreads = 256;

__device__ __forceinline__ float sigmoidf_(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void swiglu_fwd_kernel(const float* gu, float* out_f32, uint16_t* out_bf16, int64_t n, int64_t i) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * i) return;
  const int64_t r = e / i, j = e % i;
  const float g = gu[r * 2 * i + j], u = gu[r * 2 * i + i + j];
  const float v = g * sigmoidf_(g) * u;
  if (out_bf16)
    out_bf16[e] = to_bf16(v);
  else
    out_f32[e] = v;
}

__global__ void swiglu_bwd_kernel(const float* gu, const float* dout, float* dgu_f32, uint16_t* dgu_bf16, int64_t n,
                                  int64_t i) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n * i) return;
  const int64_t r = e / i, j = e % i;
  const float g = gu[r * 2 * i + j], u = gu[r * 2 * i + i + j], dy = dout[e];
  const float s = sigmoidf_(g);
  const float dg = dy * u * s * (1.0f + g * (1.0f - s)), du = dy * g * s;
  // This thread alone reads and writes elements j and i + j of row r (dgu may be gu).
  if (dgu_bf16) {
    dgu_bf16[r * 2 * i + j] = to_bf16(dg);
    dgu_bf16[r * 2 * i + i + j] = to_bf16(du);
  } else {
    dgu_f32[r * 2 * i + j] = dg;
    dgu_f32[r * 2 * i + i + j] = du;
  }
}

inline unsigned elt_blocks(int64_t count) { return unsigned((count + kEltThreads - 1) / kEltThreads); }

void swiglu_forward(const float* gu, float* out_f32, uint16_t* out_bf16, int64_t n, int64_t i, void* stream) {
  if (n * i == 0) return;
  TITAN_LAUNCH(swiglu_fwd_kernel, dim3(elt_blocks(n * i)), dim3(kEltThreads), 0, static_cast<gpu::Stream>(stream), gu,
               out_f32, out_bf16, n, i);
}

void swiglu_backward(const float* gu, const float* dout, float* dgu_f32, uint16_t* dgu_bf16, int64_t n, int64_t i,
                     void* stream) {
  if (n * i == 0) return;
  TITAN_LAUNCH(swiglu_bwd_kernel, dim3(elt_blocks(n * i)), dim3(kEltThreads), 0, static_cast<gpu::Stream>(stream), gu,
               dout, dgu_f32, dgu_bf16, n, i);
}

}  // namespace titan::cuda_kernels
