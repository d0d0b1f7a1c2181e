// Device helpers shared by the single-source kernels (ops/cuda/*.cuh): compiled by nvcc and, under
// the grid emulator, by the host compiler (core/cuda_emu/cuda.h).
#pragma once
#include <cstdint>

#include "core/cuda_emu/cuda.h"
#include "ops/cuda/launch.h"

namespace titan::cuda_kernels {

// Vector i of a row view (ops/row_view.h): row i / h, head i % h.
template <class T>
__device__ __forceinline__ T* vec_ptr(T* base, const Rows& r, int64_t i) {
  return base + (i / r.h) * r.ld + (i % r.h) * r.d;
}

// f32 -> bf16 bits, round to nearest even, quiet NaN kept (the rounding of core/dtype.h).
__device__ __forceinline__ uint16_t to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

__device__ __forceinline__ float sigmoid_f32(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The sum of v over a block of kThreads threads (a multiple of 32, at most 1024), returned to
// every thread. `scratch` holds 32 floats of shared memory; it may be reused after the call.
template <int kThreads>
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block_sum needs whole warps");
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < kThreads / 32 ? scratch[lane] : 0.0f;
  t = warp_sum(t);
  __syncthreads();  // scratch may be written again after the return
  return t;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The maximum of v over the block (as block_sum).
template <int kThreads>
__device__ __forceinline__ float block_max(float v, float* scratch) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "block_max needs whole warps");
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float t = lane < kThreads / 32 ? scratch[lane] : -INFINITY;
  t = warp_max(t);
  __syncthreads();
  return t;
}

}  // namespace titan::cuda_kernels
