// Gated RMSNorm kernels (math: ops/gated_rmsnorm/gated_rmsnorm.h). Included by exactly one
// translation unit per build (kernels_emu.cpp or kernels.cu).
//   forward: one block per row; sum of squares by block_sum, then y = w * (x r) * silu(z).
//   backward: r per row (one block per row) into scratch; dw (when wanted) as per-chunk column
//   sums then the chunks summed in order (no float atomics: the same bits on every run); then dx
//   and dz, one block per row (the dot n . x^ by block_sum).
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

constexpr int kGnThreads = 128;
constexpr int64_t kGnMinRowsPerChunk = 64;

__device__ __forceinline__ float gn_rstd(const float* xv, int64_t d, float eps, float* scratch) {
  float ss = 0;
  for (int64_t j = threadIdx.x; j < d; j += kGnThreads) ss += xv[j] * xv[j];
  ss = block_sum<kGnThreads>(ss, scratch);
  return 1.0f / sqrtf(ss / float(d) + eps);
}

__global__ void gated_rmsnorm_fwd_kernel(const float* x, const float* z, const float* w, float eps, float* y,
                                         int64_t d) {
  TITAN_SHARED(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const float* xv = x + row * d;
  const float* zv = z + row * d;
  const float r = gn_rstd(xv, d, eps, scratch);
  for (int64_t j = threadIdx.x; j < d; j += kGnThreads) {
    const float zz = zv[j];
    y[row * d + j] = w[j] * (xv[j] * r) * (zz * sigmoid_f32(zz));
  }
}

__global__ void gated_rmsnorm_rstd_kernel(const float* x, float eps, float* rstd, int64_t d) {
  TITAN_SHARED(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const float r = gn_rstd(x + row * d, d, eps, scratch);
  if (threadIdx.x == 0) rstd[row] = r;
}

// partial[c * d + j] = sum over the rows of chunk c of dy silu(z) x^ (column j).
__global__ void gated_rmsnorm_dw_partial_kernel(const float* x, const float* z, const float* rstd, const float* dy,
                                                float* partial, int64_t n, int64_t d, int64_t rows_per_chunk) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t c = blockIdx.y;
  if (j >= d) return;
  const int64_t end = c * rows_per_chunk + rows_per_chunk < n ? c * rows_per_chunk + rows_per_chunk : n;
  float s = 0;
  for (int64_t i = c * rows_per_chunk; i < end; ++i) {
    const float zz = z[i * d + j];
    s += dy[i * d + j] * (zz * sigmoid_f32(zz)) * (x[i * d + j] * rstd[i]);
  }
  partial[c * d + j] = s;
}

__global__ void gated_rmsnorm_dw_finish_kernel(const float* partial, int64_t chunks, int64_t d, float* dw) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  float s = 0;
  for (int64_t c = 0; c < chunks; ++c) s += partial[c * d + j];
  dw[j] += s;
}

// n = dy silu(z) w;  dx = r (n - x^ mean(n x^));  dz = dy w x^ silu'(z), silu' = s (1 + z (1 - s)).
__global__ void gated_rmsnorm_bwd_kernel(const float* x, const float* z, const float* w, const float* rstd,
                                         const float* dy, float* dx, float* dz, int64_t d) {
  TITAN_SHARED(float, scratch, 32);
  const int64_t row = blockIdx.x;
  const float* xv = x + row * d;
  const float* zv = z + row * d;
  const float* gv = dy + row * d;
  const float r = rstd[row];
  float dot = 0;
  for (int64_t j = threadIdx.x; j < d; j += kGnThreads) {
    const float zz = zv[j];
    dot += gv[j] * (zz * sigmoid_f32(zz)) * w[j] * (xv[j] * r);
  }
  const float mean = block_sum<kGnThreads>(dot, scratch) / float(d);
  for (int64_t j = threadIdx.x; j < d; j += kGnThreads) {
    const float zz = zv[j], s = sigmoid_f32(zz), xh = xv[j] * r, g = gv[j];
    const float nn = g * (zz * s) * w[j];
    dz[row * d + j] = g * w[j] * xh * (s + zz * s * (1.0f - s));
    dx[row * d + j] = r * (nn - xh * mean);
  }
}

namespace gated_rmsnorm_launch {
inline int64_t rows_per_chunk(int64_t n) {
  const int64_t by_grid = (n + 65534) / 65535;  // gridDim.y <= 65535
  return by_grid > kGnMinRowsPerChunk ? by_grid : kGnMinRowsPerChunk;
}
inline int64_t chunks(int64_t n) { return n == 0 ? 0 : (n + rows_per_chunk(n) - 1) / rows_per_chunk(n); }
}  // namespace gated_rmsnorm_launch

int64_t gated_rmsnorm_scratch_floats(int64_t n, int64_t d) { return n + gated_rmsnorm_launch::chunks(n) * d; }

void gated_rmsnorm_forward(const float* x, const float* z, const float* w, float eps, float* y, int64_t n, int64_t d,
                           void* stream) {
  if (n == 0) return;
  TITAN_LAUNCH(gated_rmsnorm_fwd_kernel, dim3(unsigned(n)), dim3(kGnThreads), 0, static_cast<gpu::Stream>(stream), x, z,
               w, eps, y, d);
}

void gated_rmsnorm_backward(const float* x, const float* z, const float* w, float eps, const float* dy, float* dx,
                            float* dz, float* dw, float* scratch, int64_t n, int64_t d, void* stream) {
  if (n == 0) return;
  const auto s = static_cast<gpu::Stream>(stream);
  float* rstd = scratch;
  float* partial = scratch + n;
  TITAN_LAUNCH(gated_rmsnorm_rstd_kernel, dim3(unsigned(n)), dim3(kGnThreads), 0, s, x, eps, rstd, d);
  if (dw) {
    const int64_t rpc = gated_rmsnorm_launch::rows_per_chunk(n), chunks = gated_rmsnorm_launch::chunks(n);
    const unsigned col_blocks = unsigned((d + kGnThreads - 1) / kGnThreads);
    TITAN_LAUNCH(gated_rmsnorm_dw_partial_kernel, dim3(col_blocks, unsigned(chunks)), dim3(kGnThreads), 0, s, x, z,
                 rstd, dy, partial, n, d, rpc);
    TITAN_LAUNCH(gated_rmsnorm_dw_finish_kernel, dim3(col_blocks), dim3(kGnThreads), 0, s, partial, chunks, d, dw);
  }
  TITAN_LAUNCH(gated_rmsnorm_bwd_kernel, dim3(unsigned(n)), dim3(kGnThreads), 0, s, x, z, w, rstd, dy, dx, dz, d);
}

}  // namespace titan::cuda_kernels
