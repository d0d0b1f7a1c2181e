// Flash-style attention kernels (math: ops/attention/attention.h): causal or block-causal
// (segments), grouped-query, any head_dim up to kAttnMaxD. Tiles of kAttnTile queries by
// kAttnTile keys; a block of 128 threads, 8 per tile row, each owning the head dimensions
// d = lane8 + 8 i of its row. Shared memory is dynamic, sized by D (above 48 KiB the launch
// opts in, as a GPU requires). Included by exactly one translation unit per build.
//   forward: per (query tile, q head, batch) block, the keys in tiles with the online softmax
//     (running max m, sum l, accumulator O rescaled per tile); out = O / l, lse = m + log l.
//   backward: Dv[s] = dO_s . O_s per query row; dQ per query tile (loop over key tiles); dK and
//     dV per key tile and kv head (loop over the group's q heads and the query tiles), so every
//     gradient element is written by one thread in a fixed order: no atomics, the same bits on
//     every run.
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

constexpr int kAttnTile = 16, kAttnThreads = 128, kAttnMaxD = 256;
constexpr int kAttnPerThread = kAttnMaxD / 8;


// Whether query s (of sequence b) sees key t.
__device__ __forceinline__ bool attn_visible(const AttnArgs& a, int64_t b, int64_t s, int64_t t) {
  if (s >= a.S || t >= a.S || t > s) return false;
  return a.seg == nullptr || t >= a.seg[b * a.S + s];
}

// rows x D tile of vectors (row r = token s0 + r of head h) from a row view into shared memory.
__device__ __forceinline__ void load_tile(float* dst, const float* base, const Rows& r, int64_t b, int64_t s0,
                                          int64_t h, int64_t S, int64_t heads, int64_t D) {
  for (int64_t e = threadIdx.x; e < kAttnTile * D; e += kAttnThreads) {
    const int64_t row = e / D, d = e % D, s = s0 + row;
    dst[e] = s < S ? vec_ptr(base, r, (b * S + s) * heads + h)[d] : 0.0f;
  }
}
// The same from a contiguous [B, S, heads, D] tensor.
__device__ __forceinline__ void load_tile_dense(float* dst, const float* base, int64_t b, int64_t s0, int64_t h,
                                                int64_t S, int64_t heads, int64_t D) {
  for (int64_t e = threadIdx.x; e < kAttnTile * D; e += kAttnThreads) {
    const int64_t row = e / D, d = e % D, s = s0 + row;
    dst[e] = s < S ? base[((b * S + s) * heads + h) * D + d] : 0.0f;
  }
}

__global__ void attn_fwd_kernel(AttnArgs a, float* out, float* lse) {
  TITAN_SHARED_DYNAMIC(float, smem);
  const int64_t D = a.D;
  float* qs = smem;                    // [tile, D]
  float* ks = qs + kAttnTile * D;      // [tile, D]
  float* vs = ks + kAttnTile * D;      // [tile, D]
  float* ss = vs + kAttnTile * D;      // [tile, tile] scores
  const int64_t s0 = int64_t(blockIdx.x) * kAttnTile, h = blockIdx.y, b = blockIdx.z;
  const int64_t hk = h / (a.Hq / a.Hkv);
  const int r = int(threadIdx.x) / 8, lane8 = int(threadIdx.x) % 8;
  const int64_t s = s0 + r;
  load_tile(qs, a.q, a.qr, b, s0, h, a.S, a.Hq, D);
  float acc[kAttnPerThread];
  for (int i = 0; i < kAttnPerThread; ++i) acc[i] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int64_t last_key = s0 + kAttnTile - 1 < a.S - 1 ? s0 + kAttnTile - 1 : a.S - 1;  // causal: no key after it
  for (int64_t t0 = 0; t0 <= last_key; t0 += kAttnTile) {
    load_tile(ks, a.k, a.kr, b, t0, hk, a.S, a.Hkv, D);
    load_tile(vs, a.v, a.vr, b, t0, hk, a.S, a.Hkv, D);
    __syncthreads();
    for (int e = int(threadIdx.x); e < kAttnTile * kAttnTile; e += kAttnThreads) {
      const int er = e / kAttnTile, ec = e % kAttnTile;
      float dot = 0.0f;
      for (int64_t d = 0; d < D; ++d) dot += qs[er * D + d] * ks[ec * D + d];
      ss[e] = attn_visible(a, b, s0 + er, t0 + ec) ? dot * a.scale : -INFINITY;
    }
    __syncthreads();
    float tile_max = -INFINITY;
    for (int c = 0; c < kAttnTile; ++c) tile_max = fmaxf(tile_max, ss[r * kAttnTile + c]);
    const float m_new = fmaxf(m, tile_max);
    if (m_new != -INFINITY) {  // else nothing visible yet: O, l stay 0
      const float rescale = m == -INFINITY ? 0.0f : expf(m - m_new);
      l *= rescale;
      for (int i = 0; i < kAttnPerThread; ++i) acc[i] *= rescale;
      for (int c = 0; c < kAttnTile; ++c) {
        const float sc = ss[r * kAttnTile + c];
        if (sc == -INFINITY) continue;
        const float p = expf(sc - m_new);
        l += p;
        for (int i = 0; i < kAttnPerThread; ++i) {
          const int64_t d = lane8 + 8 * i;
          if (d < D) acc[i] += p * vs[c * D + d];
        }
      }
      m = m_new;
    }
    __syncthreads();  // ks, vs, ss are overwritten by the next tile
  }
  if (s >= a.S) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int i = 0; i < kAttnPerThread; ++i) {
    const int64_t d = lane8 + 8 * i;
    if (d < D) out[((b * a.S + s) * a.Hq + h) * D + d] = acc[i] * inv;
  }
  if (lane8 == 0) lse[(b * a.Hq + h) * a.S + s] = m + logf(l);
}

// dvec[(b * Hq + h) * S + s] = sum_d dout * out (one thread per query row and head).
__global__ void attn_bwd_dot_kernel(const float* out, const float* dout, float* dvec, int64_t B, int64_t S, int64_t Hq,
                                    int64_t D) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;  // ((b * S + s) * Hq + h)
  if (e >= B * S * Hq) return;
  const int64_t h = e % Hq, s = (e / Hq) % S, b = e / (Hq * S);
  float acc = 0.0f;
  for (int64_t d = 0; d < D; ++d) acc += out[e * D + d] * dout[e * D + d];
  dvec[(b * Hq + h) * S + s] = acc;
}

// P and dS of one (query tile, key tile) pair into ps, dss: P = exp(scale q.k - lse), dS = P (dO.v - Dvec).
__device__ __forceinline__ void attn_p_ds(const AttnArgs& a, int64_t b, int64_t s0, int64_t t0, const float* qs,
                                          const float* ks, const float* vs, const float* dos, const float* lses,
                                          const float* dvs, float* ps, float* dss) {
  const int64_t D = a.D;
  for (int e = int(threadIdx.x); e < kAttnTile * kAttnTile; e += kAttnThreads) {
    const int er = e / kAttnTile, ec = e % kAttnTile;
    if (!attn_visible(a, b, s0 + er, t0 + ec)) {
      ps[e] = 0.0f, dss[e] = 0.0f;
      continue;
    }
    float qk = 0.0f, dp = 0.0f;
    for (int64_t d = 0; d < D; ++d) {
      qk += qs[er * D + d] * ks[ec * D + d];
      dp += dos[er * D + d] * vs[ec * D + d];
    }
    const float p = expf(qk * a.scale - lses[er]);
    ps[e] = p;
    dss[e] = p * (dp - dvs[er]);
  }
}

// lse and Dvec of a query tile into shared memory.
__device__ __forceinline__ void load_row_stats(float* lses, float* dvs, const float* lse, const float* dvec,
                                               const AttnArgs& a, int64_t b, int64_t h, int64_t s0) {
  if (threadIdx.x < kAttnTile) {
    const int64_t s = s0 + threadIdx.x;
    lses[threadIdx.x] = s < a.S ? lse[(b * a.Hq + h) * a.S + s] : 0.0f;
    dvs[threadIdx.x] = s < a.S ? dvec[(b * a.Hq + h) * a.S + s] : 0.0f;
  }
}

__global__ void attn_bwd_dq_kernel(AttnArgs a, const float* dout, const float* lse, const float* dvec, float* dq,
                                   Rows dqr) {
  TITAN_SHARED_DYNAMIC(float, smem);
  const int64_t D = a.D;
  float* qs = smem;
  float* dos = qs + kAttnTile * D;
  float* ks = dos + kAttnTile * D;
  float* vs = ks + kAttnTile * D;
  float* ps = vs + kAttnTile * D;
  float* dss = ps + kAttnTile * kAttnTile;
  float* lses = dss + kAttnTile * kAttnTile;
  float* dvs = lses + kAttnTile;
  const int64_t s0 = int64_t(blockIdx.x) * kAttnTile, h = blockIdx.y, b = blockIdx.z;
  const int64_t hk = h / (a.Hq / a.Hkv);
  const int r = int(threadIdx.x) / 8, lane8 = int(threadIdx.x) % 8;
  load_tile(qs, a.q, a.qr, b, s0, h, a.S, a.Hq, D);
  load_tile_dense(dos, dout, b, s0, h, a.S, a.Hq, D);
  load_row_stats(lses, dvs, lse, dvec, a, b, h, s0);
  float acc[kAttnPerThread];
  for (int i = 0; i < kAttnPerThread; ++i) acc[i] = 0.0f;
  const int64_t last_key = s0 + kAttnTile - 1 < a.S - 1 ? s0 + kAttnTile - 1 : a.S - 1;
  for (int64_t t0 = 0; t0 <= last_key; t0 += kAttnTile) {
    load_tile(ks, a.k, a.kr, b, t0, hk, a.S, a.Hkv, D);
    load_tile(vs, a.v, a.vr, b, t0, hk, a.S, a.Hkv, D);
    __syncthreads();
    attn_p_ds(a, b, s0, t0, qs, ks, vs, dos, lses, dvs, ps, dss);
    __syncthreads();
    for (int c = 0; c < kAttnTile; ++c) {
      const float ds = dss[r * kAttnTile + c];
      for (int i = 0; i < kAttnPerThread; ++i) {
        const int64_t d = lane8 + 8 * i;
        if (d < D) acc[i] += ds * ks[c * D + d];
      }
    }
    __syncthreads();
  }
  const int64_t s = s0 + r;
  if (s >= a.S) return;
  for (int i = 0; i < kAttnPerThread; ++i) {
    const int64_t d = lane8 + 8 * i;
    if (d < D) vec_ptr(dq, dqr, (b * a.S + s) * a.Hq + h)[d] = acc[i] * a.scale;
  }
}

__global__ void attn_bwd_dkv_kernel(AttnArgs a, const float* dout, const float* lse, const float* dvec, float* dk,
                                    Rows dkr, float* dv, Rows dvr) {
  TITAN_SHARED_DYNAMIC(float, smem);
  const int64_t D = a.D;
  float* qs = smem;
  float* dos = qs + kAttnTile * D;
  float* ks = dos + kAttnTile * D;
  float* vs = ks + kAttnTile * D;
  float* ps = vs + kAttnTile * D;
  float* dss = ps + kAttnTile * kAttnTile;
  float* lses = dss + kAttnTile * kAttnTile;
  float* dvs = lses + kAttnTile;
  const int64_t t0 = int64_t(blockIdx.x) * kAttnTile, hk = blockIdx.y, b = blockIdx.z;
  const int64_t group = a.Hq / a.Hkv;
  const int c = int(threadIdx.x) / 8, lane8 = int(threadIdx.x) % 8;  // this thread's key row
  load_tile(ks, a.k, a.kr, b, t0, hk, a.S, a.Hkv, D);
  load_tile(vs, a.v, a.vr, b, t0, hk, a.S, a.Hkv, D);
  float dk_acc[kAttnPerThread], dv_acc[kAttnPerThread];
  for (int i = 0; i < kAttnPerThread; ++i) dk_acc[i] = 0.0f, dv_acc[i] = 0.0f;
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
    for (int64_t s0 = t0 / kAttnTile * kAttnTile; s0 < a.S; s0 += kAttnTile) {  // causal: queries from t0 on
      __syncthreads();  // the previous tile's qs, dos, ps, dss are read no more
      load_tile(qs, a.q, a.qr, b, s0, h, a.S, a.Hq, D);
      load_tile_dense(dos, dout, b, s0, h, a.S, a.Hq, D);
      load_row_stats(lses, dvs, lse, dvec, a, b, h, s0);
      __syncthreads();
      attn_p_ds(a, b, s0, t0, qs, ks, vs, dos, lses, dvs, ps, dss);
      __syncthreads();
      for (int rr = 0; rr < kAttnTile; ++rr) {
        const float p = ps[rr * kAttnTile + c], ds = dss[rr * kAttnTile + c];
        for (int i = 0; i < kAttnPerThread; ++i) {
          const int64_t d = lane8 + 8 * i;
          if (d < D) {
            dv_acc[i] += p * dos[rr * D + d];
            dk_acc[i] += ds * qs[rr * D + d];
          }
        }
      }
    }
  const int64_t t = t0 + c;
  if (t >= a.S) return;
  for (int i = 0; i < kAttnPerThread; ++i) {
    const int64_t d = lane8 + 8 * i;
    if (d < D) {
      vec_ptr(dk, dkr, (b * a.S + t) * a.Hkv + hk)[d] = dk_acc[i] * a.scale;
      vec_ptr(dv, dvr, (b * a.S + t) * a.Hkv + hk)[d] = dv_acc[i];
    }
  }
}

inline size_t attn_fwd_smem(int64_t D) { return size_t(3 * kAttnTile * D + kAttnTile * kAttnTile) * sizeof(float); }
inline size_t attn_bwd_smem(int64_t D) {
  return size_t(4 * kAttnTile * D + 2 * kAttnTile * kAttnTile + 2 * kAttnTile) * sizeof(float);
}

const char* attention_check(const AttnArgs& a) {  // declared in launch.h
  if (a.D < 1 || a.D > kAttnMaxD) return "head_dim must be in [1, 256]";
  if (a.Hkv < 1 || a.Hq % a.Hkv != 0) return "Hq must be a multiple of Hkv";
  if (a.Hq > 65535 || a.B > 65535) return "heads and batch must be at most 65535 (grid y, z)";
  return "";
}

void attention_forward(const AttnArgs& a, float* out, float* lse, void* stream) {
  if (a.B * a.S * a.Hq == 0) return;
  const size_t smem = attn_fwd_smem(a.D);
  if (smem > 48 * 1024) TITAN_SET_MAX_DYNAMIC_SHARED(attn_fwd_kernel, smem);
  const dim3 grid(unsigned((a.S + kAttnTile - 1) / kAttnTile), unsigned(a.Hq), unsigned(a.B));
  TITAN_LAUNCH(attn_fwd_kernel, grid, dim3(kAttnThreads), smem, static_cast<gpu::Stream>(stream), a, out, lse);
}

void attention_backward(const AttnArgs& a, const float* out, const float* lse, const float* dout, float* dvec,
                        float* dq, Rows dqr, float* dk, Rows dkr, float* dv, Rows dvr, void* stream) {
  if (a.B * a.S * a.Hq == 0) return;
  const auto st = static_cast<gpu::Stream>(stream);
  const int64_t rows = a.B * a.S * a.Hq;
  TITAN_LAUNCH(attn_bwd_dot_kernel, dim3(unsigned((rows + 255) / 256)), dim3(256), 0, st, out, dout, dvec, a.B, a.S,
               a.Hq, a.D);
  const size_t smem = attn_bwd_smem(a.D);
  if (smem > 48 * 1024) {
    TITAN_SET_MAX_DYNAMIC_SHARED(attn_bwd_dq_kernel, smem);
    TITAN_SET_MAX_DYNAMIC_SHARED(attn_bwd_dkv_kernel, smem);
  }
  const unsigned tiles = unsigned((a.S + kAttnTile - 1) / kAttnTile);
  TITAN_LAUNCH(attn_bwd_dq_kernel, dim3(tiles, unsigned(a.Hq), unsigned(a.B)), dim3(kAttnThreads), smem, st, a, dout,
               lse, dvec, dq, dqr);
  TITAN_LAUNCH(attn_bwd_dkv_kernel, dim3(tiles, unsigned(a.Hkv), unsigned(a.B)), dim3(kAttnThreads), smem, st, a,
               dout, lse, dvec, dk, dkr, dv, dvr);
}

}  // namespace titan::cuda_kernels
