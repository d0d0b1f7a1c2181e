// Depthwise causal conv1d + SiLU kernels (math: ops/causal_conv1d/causal_conv1d.h). Included by
// exactly one translation unit per build (kernels_emu.cpp or kernels.cu).
//   forward: one thread per output (b, t, c); state_out: one thread per (b, c, j).
//   backward: da = dy silu'(a) per element into scratch (one thread each); dx as a gather (each
//   input u sums the outputs t in [u, u + K) of its document, in t order), d_state_in likewise
//   over the row's first document; dw as per-chunk partial sums over the tokens then the chunks
//   summed in order. No atomics: every element is written by one thread in a fixed order.
// Documents (seg): seg[b * S + t] is the start of token t's document; inputs before it are zero,
// and state_in enters the row's first document only (conv1d::input_at).
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

constexpr int kConvThreads = 128;
constexpr int64_t kConvMinRowsPerChunk = 64;

// x at position t of row b (t < 0: the state), channel c, for a token whose document starts at a0.
__device__ __forceinline__ float conv_input(const Conv1dArgs& a, int64_t b, int64_t t, int64_t c, int64_t a0) {
  if (t >= a0) return t >= 0 ? a.x[(b * a.S + t) * a.C + c] : 0.0f;
  if (a0 > 0 || a.state_in == nullptr) return 0.0f;
  return a.state_in[(b * a.C + c) * (a.K - 1) + (a.K - 1 + t)];
}

__device__ __forceinline__ int64_t conv_doc_start(const Conv1dArgs& a, int64_t b, int64_t t) {
  return a.seg ? a.seg[b * a.S + t] : 0;
}

__device__ __forceinline__ float conv_pre(const Conv1dArgs& a, int64_t b, int64_t t, int64_t c) {
  const int64_t a0 = conv_doc_start(a, b, t);
  float s = 0;
  for (int64_t j = 0; j < a.K; ++j) s += a.w[c * a.K + j] * conv_input(a, b, t - a.K + 1 + j, c, a0);
  return s;
}

__global__ void conv1d_fwd_kernel(Conv1dArgs a, float* y) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // (b * S + t) * C + c
  if (e >= a.B * a.S * a.C) return;
  const int64_t c = e % a.C, bt = e / a.C, b = bt / a.S, t = bt % a.S;
  const float v = conv_pre(a, b, t, c);
  y[e] = v * sigmoid_f32(v);
}

// state_out[b, c, j] = the input at position S - (K - 1) + j as the row's last token sees it.
__global__ void conv1d_state_out_kernel(Conv1dArgs a, float* state_out) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // (b * C + c) * (K - 1) + j
  const int64_t km1 = a.K - 1;
  if (e >= a.B * a.C * km1) return;
  const int64_t j = e % km1, bc = e / km1, c = bc % a.C, b = bc / a.C;
  const int64_t last = a.S > 0 ? conv_doc_start(a, b, a.S - 1) : 0;
  state_out[e] = conv_input(a, b, a.S - km1 + j, c, last);
}

__global__ void conv1d_da_kernel(Conv1dArgs a, const float* dy, float* da) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= a.B * a.S * a.C) return;
  const int64_t c = e % a.C, bt = e / a.C, b = bt / a.S, t = bt % a.S;
  const float v = conv_pre(a, b, t, c), s = sigmoid_f32(v);
  da[e] = dy[e] * (s + v * s * (1.0f - s));
}

// dx[b, u, c] = sum over t in [u, u + K) with u in t's document of w[c, u - t + K - 1] da[t].
__global__ void conv1d_dx_kernel(Conv1dArgs a, const float* da, float* dx) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= a.B * a.S * a.C) return;
  const int64_t c = e % a.C, bt = e / a.C, b = bt / a.S, u = bt % a.S;
  float s = 0;
  for (int64_t t = u; t < a.S && t < u + a.K; ++t)
    if (conv_doc_start(a, b, t) <= u) s += a.w[c * a.K + (u - t + a.K - 1)] * da[(b * a.S + t) * a.C + c];
  dx[e] = s;
}

// d_state_in[b, c, i] (position u = i - (K - 1) < 0) = the same sum over the first document's t.
__global__ void conv1d_dstate_kernel(Conv1dArgs a, const float* da, float* dstate) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // (b * C + c) * (K - 1) + i
  const int64_t km1 = a.K - 1;
  if (e >= a.B * a.C * km1) return;
  const int64_t i = e % km1, bc = e / km1, c = bc % a.C, b = bc / a.C, u = i - km1;
  float s = 0;
  for (int64_t t = 0; t < a.S && t <= i; ++t)
    if (conv_doc_start(a, b, t) == 0) s += a.w[c * a.K + (u - t + a.K - 1)] * da[(b * a.S + t) * a.C + c];
  dstate[e] = s;
}

// partial[ch * C * K + (c * K + j)] = sum over the tokens of chunk ch of da x[t - K + 1 + j].
__global__ void conv1d_dw_partial_kernel(Conv1dArgs a, const float* da, float* partial, int64_t rows_per_chunk) {
  const int64_t cj = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t ch = blockIdx.y, n = a.B * a.S;
  if (cj >= a.C * a.K) return;
  const int64_t c = cj / a.K, j = cj % a.K;
  const int64_t end = ch * rows_per_chunk + rows_per_chunk < n ? ch * rows_per_chunk + rows_per_chunk : n;
  float s = 0;
  for (int64_t r = ch * rows_per_chunk; r < end; ++r) {
    const int64_t b = r / a.S, t = r % a.S;
    s += da[r * a.C + c] * conv_input(a, b, t - a.K + 1 + j, c, conv_doc_start(a, b, t));
  }
  partial[ch * a.C * a.K + cj] = s;
}

__global__ void conv1d_dw_finish_kernel(const float* partial, int64_t chunks, int64_t ck, float* dw) {
  const int64_t cj = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (cj >= ck) return;
  float s = 0;
  for (int64_t ch = 0; ch < chunks; ++ch) s += partial[ch * ck + cj];
  dw[cj] += s;
}

namespace conv1d_launch {
inline int64_t rows_per_chunk(int64_t n) {
  const int64_t by_grid = (n + 65534) / 65535;  // gridDim.y <= 65535
  return by_grid > kConvMinRowsPerChunk ? by_grid : kConvMinRowsPerChunk;
}
inline int64_t chunks(int64_t n) { return n == 0 ? 0 : (n + rows_per_chunk(n) - 1) / rows_per_chunk(n); }
inline dim3 grid_of(int64_t count) { return dim3(unsigned((count + kConvThreads - 1) / kConvThreads)); }
}  // namespace conv1d_launch

int64_t causal_conv1d_scratch_floats(const Conv1dArgs& a) {
  return a.B * a.S * a.C + conv1d_launch::chunks(a.B * a.S) * a.C * a.K;
}

void causal_conv1d_forward(const Conv1dArgs& a, float* y, float* state_out, void* stream) {
  const auto s = static_cast<gpu::Stream>(stream);
  const int64_t n = a.B * a.S * a.C, ns = a.B * a.C * (a.K - 1);
  if (n > 0) TITAN_LAUNCH(conv1d_fwd_kernel, conv1d_launch::grid_of(n), dim3(kConvThreads), 0, s, a, y);
  if (state_out && ns > 0)
    TITAN_LAUNCH(conv1d_state_out_kernel, conv1d_launch::grid_of(ns), dim3(kConvThreads), 0, s, a, state_out);
}

void causal_conv1d_backward(const Conv1dArgs& a, const float* dy, float* dx, float* dw, float* d_state_in,
                            float* scratch, void* stream) {
  const auto s = static_cast<gpu::Stream>(stream);
  const int64_t n = a.B * a.S * a.C, ns = a.B * a.C * (a.K - 1), rows = a.B * a.S;
  float* da = scratch;
  float* partial = scratch + n;
  if (n > 0) {
    TITAN_LAUNCH(conv1d_da_kernel, conv1d_launch::grid_of(n), dim3(kConvThreads), 0, s, a, dy, da);
    TITAN_LAUNCH(conv1d_dx_kernel, conv1d_launch::grid_of(n), dim3(kConvThreads), 0, s, a, da, dx);
  }
  if (d_state_in && ns > 0)
    TITAN_LAUNCH(conv1d_dstate_kernel, conv1d_launch::grid_of(ns), dim3(kConvThreads), 0, s, a, da, d_state_in);
  if (dw && rows > 0 && a.C * a.K > 0) {
    const int64_t rpc = conv1d_launch::rows_per_chunk(rows), chunks = conv1d_launch::chunks(rows);
    const dim3 grid(unsigned((a.C * a.K + kConvThreads - 1) / kConvThreads), unsigned(chunks));
    TITAN_LAUNCH(conv1d_dw_partial_kernel, grid, dim3(kConvThreads), 0, s, a, da, partial, rpc);
    TITAN_LAUNCH(conv1d_dw_finish_kernel, conv1d_launch::grid_of(a.C * a.K), dim3(kConvThreads), 0, s, partial, chunks,
                 a.C * a.K, dw);
  }
}

}  // namespace titan::cuda_kernels
