// RMSNorm kernels (math: ops/rmsnorm/rmsnorm.h). Included by exactly one translation unit per
// build (kernels_emu.cpp or kernels.cu).
//   forward: one block per vector; sum of squares by block_sum, then y = w * x * rstd.
//   backward: dw first (it reads dy, which dx may overwrite): per chunk of vectors a partial sum
//   per column, then the partials summed in chunk order (the same bits on every run); then dx, one
//   block per vector.
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

constexpr int kNormThreads = 128;

template <int kThreads>
__global__ void rmsnorm_fwd_kernel(const float* x, Rows xr, const float* w, float eps, float* y_f32, uint16_t* y_bf16,
                                   Rows yr, float* rstd) {
  TITAN_SHARED(float, scratch, 32);
  const int64_t i = blockIdx.x;
  const int64_t d = xr.d;
  const float* xv = vec_ptr(x, xr, i);
  float ss = 0;
  for (int64_t j = threadIdx.x; j < d; j += kThreads) ss += xv[j] * xv[j];
  ss = block_sum<kThreads>(ss, scratch);
  const float r = 1.0f / sqrtf(ss / float(d) + eps);
  if (threadIdx.x == 0) rstd[i] = r;
  for (int64_t j = threadIdx.x; j < d; j += kThreads) {
    const float v = w[j] * (xv[j] * r);
    if (y_bf16)
      vec_ptr(y_bf16, yr, i)[j] = to_bf16(v);
    else
      vec_ptr(y_f32, yr, i)[j] = v;
  }
}

template <int kThreads>
__global__ void rmsnorm_bwd_dx_kernel(const float* x, Rows xr, const float* w, const float* rstd, const float* dy,
                                      Rows dyr, float* dx, Rows dxr, bool accumulate) {
  TITAN_SHARED(float, scratch, 32);
  const int64_t i = blockIdx.x;
  const int64_t d = xr.d;
  const float* xv = vec_ptr(x, xr, i);
  const float* gv = vec_ptr(dy, dyr, i);
  float* dxv = vec_ptr(dx, dxr, i);
  const float r = rstd[i];
  float dot = 0;
  for (int64_t j = threadIdx.x; j < d; j += kThreads) dot += w[j] * gv[j] * (xv[j] * r);
  const float mean = block_sum<kThreads>(dot, scratch) / float(d);
  // Each thread reads dy[j] before it writes dx[j] for the same j (dx may be dy).
  for (int64_t j = threadIdx.x; j < d; j += kThreads) {
    const float v = r * (w[j] * gv[j] - xv[j] * r * mean);
    dxv[j] = accumulate ? dxv[j] + v : v;
  }
}

// partial[c * d + j] = sum over the vectors of chunk c of dy[j] * x_hat[j].
__global__ void rmsnorm_dw_partial_kernel(const float* x, Rows xr, const float* rstd, const float* dy, Rows dyr,
                                          float* partial, int64_t n, int64_t rows_per_chunk) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t c = blockIdx.y;
  if (j >= xr.d) return;
  const int64_t end = c * rows_per_chunk + rows_per_chunk < n ? c * rows_per_chunk + rows_per_chunk : n;
  float s = 0;
  for (int64_t i = c * rows_per_chunk; i < end; ++i) s += vec_ptr(dy, dyr, i)[j] * (vec_ptr(x, xr, i)[j] * rstd[i]);
  partial[c * xr.d + j] = s;
}

__global__ void rmsnorm_dw_finish_kernel(const float* partial, int64_t chunks, int64_t d, float* dw) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= d) return;
  float s = 0;
  for (int64_t c = 0; c < chunks; ++c) s += partial[c * d + j];
  dw[j] += s;
}

namespace rmsnorm_launch {
constexpr int64_t kMinRowsPerChunk = 64;
inline int64_t rows_per_chunk(int64_t n) {
  const int64_t by_grid = (n + 65534) / 65535;  // gridDim.y <= 65535
  return by_grid > kMinRowsPerChunk ? by_grid : kMinRowsPerChunk;
}
inline int64_t chunks(int64_t n) { return n == 0 ? 0 : (n + rows_per_chunk(n) - 1) / rows_per_chunk(n); }
}  // namespace rmsnorm_launch

int64_t rmsnorm_dw_partial_floats(int64_t n, int64_t d) { return rmsnorm_launch::chunks(n) * d; }

void rmsnorm_forward(const float* x, Rows xr, const float* w, float eps, float* y_f32, uint16_t* y_bf16, Rows yr,
                     float* rstd, int64_t n, void* stream) {
  if (n == 0) return;
  TITAN_LAUNCH(rmsnorm_fwd_kernel<kNormThreads>, dim3(unsigned(n)), dim3(kNormThreads), 0,
               static_cast<gpu::Stream>(stream), x, xr, w, eps, y_f32, y_bf16, yr, rstd);
}

void rmsnorm_backward(const float* x, Rows xr, const float* w, const float* rstd, const float* dy, Rows dyr, float* dx,
                      Rows dxr, float* dw, float* partial, int64_t n, bool accumulate, void* stream) {
  if (n == 0) return;
  const auto s = static_cast<gpu::Stream>(stream);
  const int64_t d = xr.d;
  if (dw) {
    const int64_t rpc = rmsnorm_launch::rows_per_chunk(n), chunks = rmsnorm_launch::chunks(n);
    const unsigned col_blocks = unsigned((d + kNormThreads - 1) / kNormThreads);
    TITAN_LAUNCH(rmsnorm_dw_partial_kernel, dim3(col_blocks, unsigned(chunks)), dim3(kNormThreads), 0, s, x, xr, rstd,
                 dy, dyr, partial, n, rpc);
    TITAN_LAUNCH(rmsnorm_dw_finish_kernel, dim3(col_blocks), dim3(kNormThreads), 0, s, partial, chunks, d, dw);
  }
  TITAN_LAUNCH(rmsnorm_bwd_dx_kernel<kNormThreads>, dim3(unsigned(n)), dim3(kNormThreads), 0, s, x, xr, w, rstd, dy,
               dyr, dx, dxr, accumulate);
}

}  // namespace titan::cuda_kernels
