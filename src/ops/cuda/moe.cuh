// MoE kernels (math: ops/moe/moe.h) around the expert GEMMs, which go through blas.h. Included by
// exactly one translation unit per build (kernels_emu.cpp or kernels.cu).
//   routing: one thread per token: softmax with double sums (moe_softmax_row), the top-k of
//     p + bias with ties to the lower index and the renormalisation (moe_route_token);
//   permutation: per-expert slot counts (one block per expert, __syncthreads_count over the slots),
//     their exclusive scan (one thread), and a stable placement (one block per expert walks the
//     slots in token order, its rows numbered by a block prefix sum of "slot is mine");
//   rows: gather of token rows into expert order, the combine y[t] = sum_k w out[row] in k order;
//   backward: per row (one block each) dL/dw = dA . act (double, summed in a fixed order), the
//     SwiGLU backward scaled by the routing weight, dy scaled by it; per token the router-logit
//     gradient (moe_router_grad_row) and dx += the k expert-input rows in k order.
// No float atomics: every value is written by one thread, each sum in a fixed order. The
// permutation's cost is O(E T K) reads (every expert block reads every slot): a first version.
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

constexpr int kMoEThreads = 256;

__global__ void moe_route_kernel(const float* logits, const float* bias, int64_t T, int64_t E, int64_t K, bool norm,
                                 float* probs, int32_t* idx, float* w) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const float* l = logits + t * E;
  float* p = probs + t * E;
  double mx = l[0];
  for (int64_t e = 1; e < E; ++e) mx = l[e] > mx ? l[e] : mx;
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += exp(double(l[e]) - mx);
  for (int64_t e = 0; e < E; ++e) p[e] = float(exp(double(l[e]) - mx) / sum);
  int32_t* sel = idx + t * K;
  for (int64_t k = 0; k < K; ++k) {  // K passes of an arg-max keeping the first maximum
    int64_t best = -1;
    float best_score = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t j = 0; j < k; ++j) taken = taken || sel[j] == e;
      if (taken) continue;
      const float s = bias ? p[e] + bias[e] : p[e];
      if (best < 0 || s > best_score) {
        best = e;
        best_score = s;
      }
    }
    sel[k] = int32_t(best);
  }
  double psum = 0;
  for (int64_t k = 0; k < K; ++k) psum += p[sel[k]];
  for (int64_t k = 0; k < K; ++k) w[t * K + k] = norm ? float(double(p[sel[k]]) / psum) : p[sel[k]];
}

// Block e: counts[e] = the slots routed to expert e.
__global__ void moe_count_kernel(const int32_t* idx, int64_t slots, int32_t* counts) {
  const int32_t e = int32_t(blockIdx.x);
  int64_t n = 0;
  for (int64_t base = 0; base < slots; base += kMoEThreads) {
    const int64_t j = base + threadIdx.x;
    n += __syncthreads_count(j < slots && idx[j] == e);
  }
  if (threadIdx.x == 0) counts[e] = int32_t(n);
}

// offsets[e] = sum of counts[e' < e], offsets[E] = the total (one thread: E is small).
__global__ void moe_scan_kernel(const int32_t* counts, int64_t E, int32_t* offsets) {
  int32_t run = 0;
  for (int64_t e = 0; e < E; ++e) {
    offsets[e] = run;
    run += counts[e];
  }
  offsets[E] = run;
}

// Block e numbers its slots in slot (token-major) order: pos[j] = offsets[e] + rank, row_slot[row] = j.
__global__ void moe_place_kernel(const int32_t* idx, int64_t slots, const int32_t* offsets, int32_t* pos,
                                 int32_t* row_slot) {
  TITAN_SHARED(int32_t, warp_tot, kMoEThreads / 32);
  const int32_t e = int32_t(blockIdx.x);
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  int32_t run = offsets[e];
  for (int64_t base = 0; base < slots; base += kMoEThreads) {
    const int64_t j = base + threadIdx.x;
    const int mine = j < slots && idx[j] == e ? 1 : 0;
    int incl = mine;  // inclusive prefix within the warp
    for (int o = 1; o < 32; o *= 2) {
      const int up = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += up;
    }
    if (lane == 31) warp_tot[warp] = incl;
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kMoEThreads / 32; ++w) {
      before += w < warp ? warp_tot[w] : 0;
      total += warp_tot[w];
    }
    if (mine) {
      const int32_t row = run + before + incl - 1;
      pos[j] = row;
      row_slot[row] = int32_t(j);
    }
    run += total;
    __syncthreads();  // warp_tot is written again by the next chunk
  }
}

// row_slot[pos[j]] = j (the saved permutation's inverse, for the backward).
__global__ void moe_invert_kernel(const int32_t* pos, int64_t slots, int32_t* row_slot) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < slots) row_slot[pos[j]] = int32_t(j);
}

// dst[r] = src[row_slot[r] / K] (rows of h floats).
__global__ void moe_gather_kernel(const float* src, const int32_t* row_slot, int64_t K, int64_t rows, int64_t h,
                                  float* dst) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= rows * h) return;
  const int64_t r = e / h, c = e % h;
  dst[e] = src[(int64_t(row_slot[r]) / K) * h + c];
}

// y[t, c] = sum_k w[t, k] out[pos[t K + k], c], in k order.
__global__ void moe_combine_kernel(const float* w, const int32_t* pos, const float* out, int64_t T, int64_t H,
                                   int64_t K, float* y) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= T * H) return;
  const int64_t t = e / H, c = e % H;
  float acc = 0.0f;
  for (int64_t k = 0; k < K; ++k) acc += w[t * K + k] * out[int64_t(pos[t * K + k]) * H + c];
  y[e] = acc;
}

// dx[t, c] += sum_k rows[pos[t K + k], c], in k order.
__global__ void moe_add_slot_rows_kernel(float* dx, const int32_t* pos, const float* rows, int64_t T, int64_t H,
                                         int64_t K) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= T * H) return;
  const int64_t t = e / H, c = e % H;
  float acc = dx[e];
  for (int64_t k = 0; k < K; ++k) acc += rows[int64_t(pos[t * K + k]) * H + c];
  dx[e] = acc;
}

constexpr int kMoERowThreads = 128;

// Block r: the backward of row r's SwiGLU and routing weight wk = w[row_slot[r]]:
//   dw[r] = sum_i dA[r, i] act[r, i] (double; per-thread partials summed in thread order);
//   dgu[r] = the SwiGLU backward of wk dA[r] (f32 into dgu, and bf16 bits into dgu_bf16 when
//   non-null); dyw[r] *= wk (the rows of dy become the down projection's weighted gradient).
__global__ void moe_expert_grad_rows_kernel(const float* gu, const float* dA, const float* act, const float* w,
                                            const int32_t* row_slot, int64_t I, int64_t H, double* dw, float* dgu,
                                            uint16_t* dgu_bf16, float* dyw) {
  TITAN_SHARED(double, part, kMoERowThreads);
  const int64_t r = blockIdx.x;
  const float wk = w[row_slot[r]];
  double d = 0;
  for (int64_t i = threadIdx.x; i < I; i += kMoERowThreads) {
    const float da_raw = dA[r * I + i];
    d += double(da_raw) * act[r * I + i];
    const float g = gu[r * 2 * I + i], u = gu[r * 2 * I + I + i];
    const float da = wk * da_raw, sg = sigmoid_f32(g);
    const float dg = da * u * sg * (1.0f + g * (1.0f - sg)), du = da * g * sg;
    if (dgu_bf16) {
      dgu_bf16[r * 2 * I + i] = to_bf16(dg);
      dgu_bf16[r * 2 * I + I + i] = to_bf16(du);
    } else {
      dgu[r * 2 * I + i] = dg;
      dgu[r * 2 * I + I + i] = du;
    }
  }
  for (int64_t c = threadIdx.x; c < H; c += kMoERowThreads) dyw[r * H + c] *= wk;
  part[threadIdx.x] = d;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0;
    for (int j = 0; j < kMoERowThreads; ++j) s += part[j];
    dw[r] = s;
  }
}

// Token t: dlogits[t] from dL/dw of its slots (dw_rows[pos[t K + k]]) through the renormalisation
// and the softmax (moe_router_grad_row), plus extra[t] when non-null. p, dp: [T, E] scratch.
__global__ void moe_router_grad_kernel(const float* logits, const int32_t* idx, const float* w, const double* dw_rows,
                                       const int32_t* pos, const float* extra, int64_t T, int64_t E, int64_t K,
                                       bool norm, float* probs, double* dprobs, float* dlogits) {
  const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const float* l = logits + t * E;
  float* p = probs + t * E;
  double* dp = dprobs + t * E;
  double mx = l[0];
  for (int64_t e = 1; e < E; ++e) mx = l[e] > mx ? l[e] : mx;
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += exp(double(l[e]) - mx);
  for (int64_t e = 0; e < E; ++e) {
    p[e] = float(exp(double(l[e]) - mx) / sum);
    dp[e] = 0;
  }
  const int32_t* sel = idx + t * K;
  double S = 0, sw = 0;
  for (int64_t k = 0; k < K; ++k) {
    S += p[sel[k]];
    sw += dw_rows[pos[t * K + k]] * w[t * K + k];
  }
  for (int64_t k = 0; k < K; ++k) {
    const double dwk = dw_rows[pos[t * K + k]];
    dp[sel[k]] = norm ? (dwk - sw) / S : dwk;
  }
  double dot = 0;
  for (int64_t e = 0; e < E; ++e) dot += double(p[e]) * dp[e];
  for (int64_t e = 0; e < E; ++e)
    dlogits[t * E + e] = float(double(p[e]) * (dp[e] - dot) + (extra ? double(extra[t * E + e]) : 0.0));
}

inline unsigned moe_blocks(int64_t count, int threads) { return unsigned((count + threads - 1) / threads); }

void moe_route(const float* logits, const float* bias, int64_t T, int64_t E, int64_t K, bool norm, float* probs,
               int32_t* idx, float* w, void* stream) {
  if (T == 0) return;
  TITAN_LAUNCH(moe_route_kernel, dim3(moe_blocks(T, 128)), dim3(128), 0, static_cast<gpu::Stream>(stream), logits, bias,
               T, E, K, norm, probs, idx, w);
}

void moe_permute(const int32_t* idx, int64_t slots, int64_t E, int32_t* counts, int32_t* offsets, int32_t* pos,
                 int32_t* row_slot, void* stream) {
  const auto s = static_cast<gpu::Stream>(stream);
  TITAN_LAUNCH(moe_count_kernel, dim3(unsigned(E)), dim3(kMoEThreads), 0, s, idx, slots, counts);
  TITAN_LAUNCH(moe_scan_kernel, dim3(1), dim3(1), 0, s, counts, E, offsets);
  TITAN_LAUNCH(moe_place_kernel, dim3(unsigned(E)), dim3(kMoEThreads), 0, s, idx, slots, offsets, pos, row_slot);
}

void moe_invert_permutation(const int32_t* pos, int64_t slots, int32_t* row_slot, void* stream) {
  if (slots == 0) return;
  TITAN_LAUNCH(moe_invert_kernel, dim3(moe_blocks(slots, kMoEThreads)), dim3(kMoEThreads), 0,
               static_cast<gpu::Stream>(stream), pos, slots, row_slot);
}

void moe_gather_rows(const float* src, const int32_t* row_slot, int64_t K, int64_t rows, int64_t h, float* dst,
                     void* stream) {
  if (rows * h == 0) return;
  TITAN_LAUNCH(moe_gather_kernel, dim3(moe_blocks(rows * h, kMoEThreads)), dim3(kMoEThreads), 0,
               static_cast<gpu::Stream>(stream), src, row_slot, K, rows, h, dst);
}

void moe_combine(const float* w, const int32_t* pos, const float* out, int64_t T, int64_t H, int64_t K, float* y,
                 void* stream) {
  if (T * H == 0) return;
  TITAN_LAUNCH(moe_combine_kernel, dim3(moe_blocks(T * H, kMoEThreads)), dim3(kMoEThreads), 0,
               static_cast<gpu::Stream>(stream), w, pos, out, T, H, K, y);
}

void moe_add_slot_rows(float* dx, const int32_t* pos, const float* rows, int64_t T, int64_t H, int64_t K,
                       void* stream) {
  if (T * H == 0) return;
  TITAN_LAUNCH(moe_add_slot_rows_kernel, dim3(moe_blocks(T * H, kMoEThreads)), dim3(kMoEThreads), 0,
               static_cast<gpu::Stream>(stream), dx, pos, rows, T, H, K);
}

void moe_expert_grad_rows(const float* gu, const float* dA, const float* act, const float* w, const int32_t* row_slot,
                          int64_t rows, int64_t I, int64_t H, double* dw, float* dgu, uint16_t* dgu_bf16, float* dyw,
                          void* stream) {
  if (rows == 0) return;
  TITAN_LAUNCH(moe_expert_grad_rows_kernel, dim3(unsigned(rows)), dim3(kMoERowThreads), 0,
               static_cast<gpu::Stream>(stream), gu, dA, act, w, row_slot, I, H, dw, dgu, dgu_bf16, dyw);
}

void moe_router_grad(const float* logits, const int32_t* idx, const float* w, const double* dw_rows, const int32_t* pos,
                     const float* extra, int64_t T, int64_t E, int64_t K, bool norm, float* probs, double* dprobs,
                     float* dlogits, void* stream) {
  if (T == 0) return;
  TITAN_LAUNCH(moe_router_grad_kernel, dim3(moe_blocks(T, 128)), dim3(128), 0, static_cast<gpu::Stream>(stream), logits,
               idx, w, dw_rows, pos, extra, T, E, K, norm, probs, dprobs, dlogits);
}

}  // namespace titan::cuda_kernels
