// Multi-tensor kernels of ops/foreach/foreach.h (gradient clipping) over f32 ranges in device
// memory, many ranges per launch: a device table of {data, n} and one (range, first element) entry
// per block, each block owning kForeachChunk elements of one range (as adamw_multi_kernel).
// Included by exactly one translation unit per build.
//   foreach_sumsq_kernel: per chunk, each thread sums the squares of its elements (every 256th) in
//     double, then a shared-memory tree of fixed shape adds the 256 partial sums; chunk c's sum goes
//     to partial[c].
//   foreach_sum_partials_kernel: one block adds the chunk sums the same way (thread t: chunks t,
//     t + 256, ... in order, then the tree).
// No atomics, so the result is the same bits for every block and thread order. x^2 of an f32 is
// exact in double, so a fused multiply-add there rounds as the separate product and sum would.
//   foreach_scale_kernel: x = x * c in f32, the CPU's product (the same bits).
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

constexpr int kForeachThreads = 256;
constexpr int64_t kForeachChunk = 32 * kForeachThreads;  // elements per block

// Shared-memory sum of the block's s[0, kForeachThreads), in a fixed tree; returns it to thread 0.
__device__ __forceinline__ double foreach_block_sum(double* s) {
  __syncthreads();
  for (int w = kForeachThreads / 2; w > 0; w /= 2) {
    if (int(threadIdx.x) < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  return s[0];
}

__global__ void foreach_sumsq_kernel(const ForeachRange* ranges, const ForeachChunk* chunks, double* partial) {
  TITAN_SHARED(double, s, kForeachThreads);
  const ForeachChunk c = chunks[blockIdx.x];
  const ForeachRange r = ranges[c.range];
  const int64_t end = c.start + kForeachChunk < r.n ? c.start + kForeachChunk : r.n;
  double acc = 0;
  for (int64_t e = c.start + threadIdx.x; e < end; e += kForeachThreads) {
    const double x = r.data[e];
    acc += x * x;
  }
  s[threadIdx.x] = acc;
  const double total = foreach_block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

__global__ void foreach_sum_partials_kernel(const double* partial, int64_t n, double* out) {
  TITAN_SHARED(double, s, kForeachThreads);
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += kForeachThreads) acc += partial[i];
  s[threadIdx.x] = acc;
  const double total = foreach_block_sum(s);
  if (threadIdx.x == 0) *out = total;
}

__global__ void foreach_scale_kernel(const ForeachRange* ranges, const ForeachChunk* chunks, float c) {
  const ForeachChunk k = chunks[blockIdx.x];
  const ForeachRange r = ranges[k.range];
  const int64_t end = k.start + kForeachChunk < r.n ? k.start + kForeachChunk : r.n;
  for (int64_t e = k.start + threadIdx.x; e < end; e += kForeachThreads) r.data[e] = r.data[e] * c;
}

int64_t foreach_chunk() { return kForeachChunk; }

void foreach_sum_squares(const ForeachRange* ranges, const ForeachChunk* chunks, int64_t n_chunks, double* partial,
                         double* out, void* stream) {
  if (n_chunks == 0) return;
  const gpu::Stream s = static_cast<gpu::Stream>(stream);
  TITAN_LAUNCH(foreach_sumsq_kernel, dim3(unsigned(n_chunks)), dim3(kForeachThreads), 0, s, ranges, chunks, partial);
  TITAN_LAUNCH(foreach_sum_partials_kernel, dim3(1), dim3(kForeachThreads), 0, s, partial, n_chunks, out);
}

void foreach_scale(const ForeachRange* ranges, const ForeachChunk* chunks, int64_t n_chunks, float c, void* stream) {
  if (n_chunks == 0) return;
  TITAN_LAUNCH(foreach_scale_kernel, dim3(unsigned(n_chunks)), dim3(kForeachThreads), 0,
               static_cast<gpu::Stream>(stream), ranges, chunks, c);
}

}  // namespace titan::cuda_kernels
