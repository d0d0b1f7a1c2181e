// Gated delta rule kernels (math: ops/gated_delta/gated_delta.h): the token recurrence, in f32.
// Included by exactly one translation unit per build (kernels_emu.cpp or kernels.cu).
//
// The columns of the state S [dk, dv] evolve independently given k, q, exp(g), beta (delta_j
// needs only column j), so a block owns one (row b, value head h, tile of kGdCols value columns)
// and runs the row's tokens in order: thread (lane, rg) of the 32 x kGdRows block keeps the
// elements (i, lane) with i = rg mod kGdRows of the tile in shared memory, and only it touches
// them; the column sums over i (S^T k, S^T q, ...) are partial sums per row group, added in
// row-group order. Packed documents (seg) reset the state to zero at each document start inside
// the row, as the reference does; the initial state enters the row's first document only.
//   forward: q^, k^ (scaled, L2-normalised) by one warp per vector into scratch; then the blocks.
//   backward: each block re-runs its forward keeping the state at every chunk start (chunk =
//   ceil(sqrt(S)) tokens), then per chunk, last first, recomputes the states before each of its
//   tokens (device scratch) and runs the reverse recurrence of the reference backward with dS in
//   shared memory. The sums over value columns (dq^, dk^, dbeta, dg) are written per tile and
//   summed over tiles and the heads of a group in a fixed order by two small kernels, which also
//   apply the L2 normalisation's backward. No atomics: the same bits on every run.
#pragma once
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

constexpr int kGdCols = 32, kGdRows = 4, kGdThreads = kGdCols * kGdRows;
constexpr int64_t kGdMaxDk = 512;
constexpr float kGdNormEps = 1e-6f;

struct GdGeom {
  int64_t tiles;   // ceil(dv / kGdCols)
  int64_t blocks;  // B * Hv * tiles
  int64_t chunk;   // backward checkpoint interval
  int64_t chunks;  // ceil(S / chunk)
};

inline GdGeom gd_geom(const GatedDeltaArgs& a) {
  GdGeom g;
  g.tiles = (a.dv + kGdCols - 1) / kGdCols;
  g.blocks = a.B * a.Hv * g.tiles;
  g.chunk = 1;
  while (g.chunk * g.chunk < a.S) ++g.chunk;
  g.chunks = (a.S + g.chunk - 1) / g.chunk;
  return g;
}

// y = scale * x r, r = 1 / sqrt(|x|^2 + eps) (l2) or 1; one warp per vector of length d.
__global__ void gd_normalise_kernel(const float* x, float* y, int64_t d, float scale, bool l2) {
  const int64_t i = blockIdx.x;
  const float* xv = x + i * d;
  float ss = 0;
  for (int64_t j = threadIdx.x; j < d; j += 32) ss += xv[j] * xv[j];
  ss = warp_sum(ss);
  const float r = l2 ? 1.0f / sqrtf(ss + kGdNormEps) : 1.0f;
  for (int64_t j = threadIdx.x; j < d; j += 32) y[i * d + j] = scale * xv[j] * r;
}

// The per-block view of one (b, h, tile).
struct GdBlock {
  int64_t b, h, hk, tile, j;  // j: this thread's value column
  int lane, rg, tid;
  bool col;  // j < dv
};

__device__ __forceinline__ GdBlock gd_block(const GatedDeltaArgs& a) {
  GdBlock k;
  const int64_t tiles = (a.dv + kGdCols - 1) / kGdCols;
  k.tile = int64_t(blockIdx.x) % tiles;
  const int64_t bh = int64_t(blockIdx.x) / tiles;
  k.b = bh / a.Hv, k.h = bh % a.Hv, k.hk = k.h / (a.Hv / a.Hk);
  k.lane = int(threadIdx.x), k.rg = int(threadIdx.y), k.tid = k.rg * kGdCols + k.lane;
  k.j = k.tile * kGdCols + k.lane;
  k.col = k.j < a.dv;
  return k;
}

__device__ __forceinline__ bool gd_doc_start(const GatedDeltaArgs& a, int64_t b, int64_t t) {
  return t > 0 && a.seg != nullptr && a.seg[b * a.S + t] == t;
}

// Loads the token's normalised q^ (when qn is non-null) and k^ into shared memory.
__device__ __forceinline__ void gd_load_token(const GatedDeltaArgs& a, const GdBlock& k, int64_t t, const float* qn,
                                              const float* kn, float* qs, float* ks) {
  const int64_t tk = (k.b * a.S + t) * a.Hk + k.hk;
  for (int64_t e = k.tid; e < a.dk; e += kGdThreads) {
    if (qn) qs[e] = qn[tk * a.dk + e];
    ks[e] = kn[tk * a.dk + e];
  }
}

// Sum over the row groups of the per-group partials red[rg * kGdCols + lane] (fixed order).
__device__ __forceinline__ float gd_sum_groups(const float* red, int lane) {
  float s = 0;
  for (int r = 0; r < kGdRows; ++r) s += red[r * kGdCols + lane];
  return s;
}

// One token of the recurrence on the thread's state elements st[i * kGdCols + lane]: st = a st +
// k^ delta^T with delta = beta (v - a st^T k^). ks loaded and visible (after a barrier). Returns
// nothing; red_kv is used for the column sums (two barriers' worth: written, synced, read).
__device__ __forceinline__ void gd_advance(const GatedDeltaArgs& a, const GdBlock& k, int64_t t, float* st,
                                           const float* ks, float* red_kv) {
  const int64_t tv = (k.b * a.S + t) * a.Hv + k.h;
  float p = 0;
  for (int64_t i = k.rg; i < a.dk; i += kGdRows) p += st[i * kGdCols + k.lane] * ks[i];
  red_kv[k.rg * kGdCols + k.lane] = p;
  __syncthreads();
  const float ga = expf(a.g[tv]), bt = a.beta[tv];
  const float vj = k.col ? a.v[tv * a.dv + k.j] : 0.0f;
  const float delta = bt * (vj - ga * gd_sum_groups(red_kv, k.lane));
  for (int64_t i = k.rg; i < a.dk; i += kGdRows)
    st[i * kGdCols + k.lane] = ga * st[i * kGdCols + k.lane] + ks[i] * delta;
}

__device__ __forceinline__ void gd_zero_own(const GatedDeltaArgs& a, const GdBlock& k, float* st) {
  for (int64_t i = k.rg; i < a.dk; i += kGdRows) st[i * kGdCols + k.lane] = 0.0f;
}

__device__ __forceinline__ void gd_load_initial(const GatedDeltaArgs& a, const GdBlock& k, float* st) {
  const int64_t base = (k.b * a.Hv + k.h) * a.dk;
  for (int64_t i = k.rg; i < a.dk; i += kGdRows)
    st[i * kGdCols + k.lane] = (k.col && a.init) ? a.init[(base + i) * a.dv + k.j] : 0.0f;
}

inline size_t gd_fwd_smem(int64_t dk) { return size_t(dk * kGdCols + 2 * dk + 2 * kGdRows * kGdCols) * sizeof(float); }
inline size_t gd_bwd_smem(int64_t dk) {
  return size_t(2 * dk * kGdCols + 2 * dk + 2 * kGdRows * kGdCols + kGdRows) * sizeof(float);
}

// out [B, S, Hv, dv]; fin [B, Hv, dk, dv] or null (may be a.init: each element is read at the
// start and written at the end by the same thread).
__global__ void gd_fwd_kernel(GatedDeltaArgs a, const float* qn, const float* kn, float* out, float* fin) {
  TITAN_SHARED_DYNAMIC(float, smem);
  float* st = smem;                 // [dk, kGdCols]
  float* qs = st + a.dk * kGdCols;  // [dk]
  float* ks = qs + a.dk;            // [dk]
  float* red_kv = ks + a.dk;        // [kGdRows, kGdCols]
  float* red_o = red_kv + kGdRows * kGdCols;
  const GdBlock k = gd_block(a);
  gd_load_initial(a, k, st);
  for (int64_t t = 0; t < a.S; ++t) {
    gd_load_token(a, k, t, qn, kn, qs, ks);
    if (gd_doc_start(a, k.b, t)) gd_zero_own(a, k, st);
    __syncthreads();  // qs, ks loaded
    gd_advance(a, k, t, st, ks, red_kv);
    float o = 0;
    for (int64_t i = k.rg; i < a.dk; i += kGdRows) o += st[i * kGdCols + k.lane] * qs[i];
    red_o[k.rg * kGdCols + k.lane] = o;
    __syncthreads();  // out partials written; every read of qs, ks, red_kv of this token done
    if (k.rg == 0 && k.col) out[((k.b * a.S + t) * a.Hv + k.h) * a.dv + k.j] = gd_sum_groups(red_o, k.lane);
  }
  if (fin && k.col) {
    const int64_t base = (k.b * a.Hv + k.h) * a.dk;
    for (int64_t i = k.rg; i < a.dk; i += kGdRows) fin[(base + i) * a.dv + k.j] = st[i * kGdCols + k.lane];
  }
}

// The reverse recurrence (gated_delta reference backward), per block. Per-tile partial outputs:
// dqp, dkp [B, S, Hv, tiles, dk]; dbp, dgp [B, S, Hv, tiles]. saved: per block, the states at the
// chunk starts [chunks, dk, kGdCols] then the states before each token of one chunk [chunk, dk,
// kGdCols] (each element written and read by its own thread only).
__global__ void gd_bwd_kernel(GatedDeltaArgs a, const float* qn, const float* kn, const float* dout, const float* dfin,
                              float* dv_out, float* dinit, float* dqp, float* dkp, float* dbp, float* dgp, float* saved,
                              int64_t chunk, int64_t chunks) {
  TITAN_SHARED_DYNAMIC(float, smem);
  const int64_t tile_elems = a.dk * kGdCols;
  float* st = smem;             // [dk, kGdCols] state
  float* ds = st + tile_elems;  // [dk, kGdCols] dS
  float* qs = ds + tile_elems;  // [dk]
  float* ks = qs + a.dk;        // [dk]
  float* red_kv = ks + a.dk;    // [kGdRows, kGdCols]
  float* red_dd = red_kv + kGdRows * kGdCols;
  float* red_g = red_dd + kGdRows * kGdCols;  // [kGdRows]
  const GdBlock k = gd_block(a);
  const int64_t tiles = (a.dv + kGdCols - 1) / kGdCols;
  float* ckpt = saved + int64_t(blockIdx.x) * (chunks + chunk) * tile_elems;
  float* prev = ckpt + chunks * tile_elems;

  // Pass 1: the forward, keeping the state at each chunk start (after any document reset).
  gd_load_initial(a, k, st);
  for (int64_t t = 0; t < a.S; ++t) {
    gd_load_token(a, k, t, nullptr, kn, qs, ks);
    if (gd_doc_start(a, k.b, t)) gd_zero_own(a, k, st);
    if (t % chunk == 0)
      for (int64_t i = k.rg; i < a.dk; i += kGdRows)
        ckpt[(t / chunk) * tile_elems + i * kGdCols + k.lane] = st[i * kGdCols + k.lane];
    __syncthreads();
    gd_advance(a, k, t, st, ks, red_kv);
    __syncthreads();  // every read of ks and red_kv of this token done
  }

  const int64_t fbase = (k.b * a.Hv + k.h) * a.dk;
  for (int64_t i = k.rg; i < a.dk; i += kGdRows)
    ds[i * kGdCols + k.lane] = (k.col && dfin) ? dfin[(fbase + i) * a.dv + k.j] : 0.0f;

  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * chunk, t1 = t0 + chunk < a.S ? t0 + chunk : a.S;
    // The states before each token of the chunk.
    for (int64_t i = k.rg; i < a.dk; i += kGdRows)
      st[i * kGdCols + k.lane] = ckpt[c * tile_elems + i * kGdCols + k.lane];
    for (int64_t t = t0; t < t1; ++t) {
      gd_load_token(a, k, t, nullptr, kn, qs, ks);
      if (gd_doc_start(a, k.b, t)) gd_zero_own(a, k, st);
      for (int64_t i = k.rg; i < a.dk; i += kGdRows)
        prev[(t - t0) * tile_elems + i * kGdCols + k.lane] = st[i * kGdCols + k.lane];
      __syncthreads();
      gd_advance(a, k, t, st, ks, red_kv);
      __syncthreads();
    }
    // The reverse over the chunk: P = the state before token t, S' = a P, S = S' + k delta^T.
    for (int64_t t = t1 - 1; t >= t0; --t) {
      const float* P = prev + (t - t0) * tile_elems;
      const int64_t tv = (k.b * a.S + t) * a.Hv + k.h;
      const int64_t pv = tv * tiles + k.tile;  // the per-tile partial's index
      gd_load_token(a, k, t, qn, kn, qs, ks);
      __syncthreads();  // B1: qs, ks loaded
      const float ga = expf(a.g[tv]), bt = a.beta[tv];
      const float vj = k.col ? a.v[tv * a.dv + k.j] : 0.0f;
      const float doj = k.col ? dout[tv * a.dv + k.j] : 0.0f;
      float p = 0;
      for (int64_t i = k.rg; i < a.dk; i += kGdRows) p += P[i * kGdCols + k.lane] * ks[i];
      red_kv[k.rg * kGdCols + k.lane] = p;
      __syncthreads();  // B2
      const float kv = ga * gd_sum_groups(red_kv, k.lane);
      const float delta = bt * (vj - kv);
      // dq^_i = sum_j S[i, j] do_j (over this tile's columns); dS += q^ do^T; then dd = dS^T k^.
      float p2 = 0;
      for (int64_t i = k.rg; i < a.dk; i += kGdRows) {
        const int64_t e = i * kGdCols + k.lane;
        const float dq = warp_sum((ga * P[e] + ks[i] * delta) * doj);
        if (k.lane == 0) dqp[pv * a.dk + i] = dq;
        ds[e] += qs[i] * doj;
        p2 += ds[e] * ks[i];
      }
      red_dd[k.rg * kGdCols + k.lane] = p2;
      __syncthreads();  // B3
      const float dd = gd_sum_groups(red_dd, k.lane);
      if (k.rg == 0) {
        if (k.col) dv_out[tv * a.dv + k.j] = bt * dd;
        const float db = warp_sum((vj - kv) * dd);
        if (k.lane == 0) dbp[pv] = db;
      }
      // dk^_i = sum_j (dS[i, j] delta_j - beta S'[i, j] dd_j); dS' = dS - beta k^ dd^T.
      float pg = 0;
      for (int64_t i = k.rg; i < a.dk; i += kGdRows) {
        const int64_t e = i * kGdCols + k.lane;
        const float dk = warp_sum(ds[e] * delta - bt * (ga * P[e]) * dd);
        if (k.lane == 0) dkp[pv * a.dk + i] = dk;
        ds[e] -= bt * ks[i] * dd;
        pg += P[e] * ds[e];
      }
      pg = warp_sum(pg);
      if (k.lane == 0) red_g[k.rg] = pg;
      __syncthreads();  // B4: red_g written; every read of qs, ks, red_kv, red_dd of this token done
      if (k.tid == 0) {
        float s = 0;
        for (int r = 0; r < kGdRows; ++r) s += red_g[r];
        dgp[pv] = ga * s;
      }
      const bool reset = gd_doc_start(a, k.b, t);
      for (int64_t i = k.rg; i < a.dk; i += kGdRows) {
        const int64_t e = i * kGdCols + k.lane;
        ds[e] = reset ? 0.0f : ga * ds[e];
        if (t == 0 && dinit && k.col) dinit[(fbase + i) * a.dv + k.j] = ds[e];
      }
    }
  }
}

// dx for the vectors (b, t, hk) of q or k: the partials of the group's value heads and tiles
// summed in order, then the backward of y = scale x r. One warp per vector; dx holds the sum
// between the two passes (each element read back by the thread that wrote it).
__global__ void gd_unnormalise_kernel(const float* x, const float* part, float* dx, int64_t Hk, int64_t Hv,
                                      int64_t tiles, int64_t d, float scale, bool l2) {
  const int64_t i = blockIdx.x;  // (b * S + t) * Hk + hk
  const int64_t bt = i / Hk, hk = i % Hk, ratio = Hv / Hk;
  const float* xv = x + i * d;
  float* gv = dx + i * d;
  float ss = 0;
  for (int64_t e = threadIdx.x; e < d; e += 32) {
    float g = 0;
    for (int64_t hh = 0; hh < ratio; ++hh)
      for (int64_t tl = 0; tl < tiles; ++tl) g += part[((bt * Hv + hk * ratio + hh) * tiles + tl) * d + e];
    gv[e] = g;
    ss += xv[e] * xv[e];
  }
  if (!l2) {
    for (int64_t e = threadIdx.x; e < d; e += 32) gv[e] = scale * gv[e];
    return;
  }
  ss = warp_sum(ss);
  const float r = 1.0f / sqrtf(ss + kGdNormEps);
  float dot = 0;
  for (int64_t e = threadIdx.x; e < d; e += 32) dot += xv[e] * r * gv[e];
  dot = warp_sum(dot);
  for (int64_t e = threadIdx.x; e < d; e += 32) gv[e] = scale * r * (gv[e] - xv[e] * r * dot);
}

// dbeta, dg [B, S, Hv]: the tiles' partials summed in order.
__global__ void gd_sum_tiles_kernel(const float* dbp, const float* dgp, float* dbeta, float* dg, int64_t n,
                                    int64_t tiles) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= n) return;
  float sb = 0, sg = 0;
  for (int64_t tl = 0; tl < tiles; ++tl) sb += dbp[e * tiles + tl], sg += dgp[e * tiles + tl];
  dbeta[e] = sb;
  dg[e] = sg;
}

const char* gated_delta_check(const GatedDeltaArgs& a) {  // declared in launch.h
  if (a.dk < 1 || a.dk > kGdMaxDk) return "key head dim must be in [1, 512]";
  if (a.dv < 1) return "empty value head dim";
  if (a.Hk < 1 || a.Hv % a.Hk != 0) return "Hv must be a multiple of Hk";
  if (a.B * a.Hv * ((a.dv + kGdCols - 1) / kGdCols) > 0x7fffffff) return "too many (row, head, column tile) blocks";
  if (a.B * a.S * a.Hk > 0x7fffffff) return "too many q/k vectors";
  return "";
}

int64_t gated_delta_forward_scratch_floats(const GatedDeltaArgs& a) { return 2 * a.B * a.S * a.Hk * a.dk; }

int64_t gated_delta_backward_scratch_floats(const GatedDeltaArgs& a) {
  const GdGeom g = gd_geom(a);
  const int64_t per_token = a.B * a.S * a.Hv * g.tiles;
  return gated_delta_forward_scratch_floats(a) + per_token * (2 * a.dk + 2) +
         g.blocks * (g.chunks + g.chunk) * a.dk * kGdCols;
}

namespace {
void gd_normalise_qk(const GatedDeltaArgs& a, float* qn, float* kn, gpu::Stream s) {
  const int64_t n = a.B * a.S * a.Hk;
  if (n == 0) return;
  TITAN_LAUNCH(gd_normalise_kernel, dim3(unsigned(n)), dim3(32), 0, s, a.q, qn, a.dk, a.scale, a.l2norm);
  TITAN_LAUNCH(gd_normalise_kernel, dim3(unsigned(n)), dim3(32), 0, s, a.k, kn, a.dk, 1.0f, a.l2norm);
}
}  // namespace

void gated_delta_forward(const GatedDeltaArgs& a, float* out, float* fin, float* scratch, void* stream) {
  const GdGeom g = gd_geom(a);
  if (g.blocks == 0) return;
  const auto s = static_cast<gpu::Stream>(stream);
  float* qn = scratch;
  float* kn = qn + a.B * a.S * a.Hk * a.dk;
  gd_normalise_qk(a, qn, kn, s);
  const size_t smem = gd_fwd_smem(a.dk);
  if (smem > 48 * 1024) TITAN_SET_MAX_DYNAMIC_SHARED(gd_fwd_kernel, smem);
  TITAN_LAUNCH(gd_fwd_kernel, dim3(unsigned(g.blocks)), dim3(kGdCols, kGdRows), smem, s, a, qn, kn, out, fin);
}

void gated_delta_backward(const GatedDeltaArgs& a, const float* dout, const float* dfin, float* dq, float* dk,
                          float* dv, float* dg, float* dbeta, float* dinit, float* scratch, void* stream) {
  const GdGeom g = gd_geom(a);
  if (g.blocks == 0) return;
  const auto s = static_cast<gpu::Stream>(stream);
  const int64_t nqk = a.B * a.S * a.Hk, per_token = a.B * a.S * a.Hv * g.tiles;
  float* qn = scratch;
  float* kn = qn + nqk * a.dk;
  float* dqp = kn + nqk * a.dk;
  float* dkp = dqp + per_token * a.dk;
  float* dbp = dkp + per_token * a.dk;
  float* dgp = dbp + per_token;
  float* saved = dgp + per_token;
  gd_normalise_qk(a, qn, kn, s);
  const size_t smem = gd_bwd_smem(a.dk);
  if (smem > 48 * 1024) TITAN_SET_MAX_DYNAMIC_SHARED(gd_bwd_kernel, smem);
  TITAN_LAUNCH(gd_bwd_kernel, dim3(unsigned(g.blocks)), dim3(kGdCols, kGdRows), smem, s, a, qn, kn, dout, dfin, dv,
               dinit, dqp, dkp, dbp, dgp, saved, g.chunk, g.chunks);
  if (nqk == 0) return;
  TITAN_LAUNCH(gd_unnormalise_kernel, dim3(unsigned(nqk)), dim3(32), 0, s, a.q, dqp, dq, a.Hk, a.Hv, g.tiles, a.dk,
               a.scale, a.l2norm);
  TITAN_LAUNCH(gd_unnormalise_kernel, dim3(unsigned(nqk)), dim3(32), 0, s, a.k, dkp, dk, a.Hk, a.Hv, g.tiles, a.dk,
               1.0f, a.l2norm);
  const int64_t n = a.B * a.S * a.Hv;
  TITAN_LAUNCH(gd_sum_tiles_kernel, dim3(unsigned((n + 127) / 128)), dim3(128), 0, s, dbp, dgp, dbeta, dg, n, g.tiles);
}

}  // namespace titan::cuda_kernels
