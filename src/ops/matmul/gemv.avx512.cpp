// AVX-512 body of the decode GEMV (ops/matmul/gemv.h; compiled with AVX-512 flags, called only
// after a run-time check). Eight W rows (six at m = 4) at a time against all m (<= 4)
// x rows: up to 24 accumulators of 16 lanes, each W vector loaded once (bf16 widened by a shift)
// and used by every x row. Every output is the same lane-wise sum whichever block it falls in (the N tail runs the
// same loop one W row at a time), then one fixed-order horizontal add.
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cstdint>

#include "ops/matmul/gemv.h"

namespace titan::detail {
namespace {

template <bool BF>
inline __m512 load_w(const void* w, int64_t off) {
  if constexpr (BF) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + off));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_loadu_ps(static_cast<const float*>(w) + off);
  }
}

template <bool BF>
inline __m512 load_w_tail(const void* w, int64_t off, __mmask16 m) {
  if constexpr (BF) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + off);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(w) + off);
  }
}

// Outputs n .. n + NW - 1 of the M rows.
template <int M, int NW, bool BF>
inline void block(const float* x, int64_t k, const void* w, int64_t n, float* y, int64_t ldy, const float* add) {
  __m512 acc[M][NW];
  for (int r = 0; r < M; ++r)
    for (int j = 0; j < NW; ++j) acc[r][j] = _mm512_setzero_ps();
  int64_t i = 0;
  // 32 columns per step (a whole 64-byte line of each bf16 row), each row's stream prefetched
  // kAheadBytes ahead so that the line fetches of the NW rows overlap: measured with one thread
  // (CPU time, m = 1, W of 128-256 MB) bf16 7.3 -> 9.2 GB/s, f32 unchanged at ~11.5 GB/s. The
  // lanes still add their products in column order, so the sums are those of 16-column steps.
  constexpr int64_t kAheadBytes = 1024, es = BF ? 2 : 4;
  for (; i + 32 <= k; i += 32) {
    for (int j = 0; j < NW; ++j)
      _mm_prefetch(static_cast<const char*>(w) + ((n + j) * k + i) * es + kAheadBytes, _MM_HINT_T0);
    for (int h = 0; h < 2; ++h) {
      __m512 xv[M];
      for (int r = 0; r < M; ++r) xv[r] = _mm512_loadu_ps(x + r * k + i + 16 * h);
      for (int j = 0; j < NW; ++j) {
        const __m512 wv = load_w<BF>(w, (n + j) * k + i + 16 * h);
        for (int r = 0; r < M; ++r) acc[r][j] = _mm512_fmadd_ps(xv[r], wv, acc[r][j]);
      }
    }
  }
  for (; i + 16 <= k; i += 16) {
    __m512 xv[M];
    for (int r = 0; r < M; ++r) xv[r] = _mm512_loadu_ps(x + r * k + i);
    for (int j = 0; j < NW; ++j) {
      const __m512 wv = load_w<BF>(w, (n + j) * k + i);
      for (int r = 0; r < M; ++r) acc[r][j] = _mm512_fmadd_ps(xv[r], wv, acc[r][j]);
    }
  }
  if (i < k) {
    const __mmask16 mask = __mmask16((1u << (k - i)) - 1u);
    __m512 xv[M];
    for (int r = 0; r < M; ++r) xv[r] = _mm512_maskz_loadu_ps(mask, x + r * k + i);
    for (int j = 0; j < NW; ++j) {
      const __m512 wv = load_w_tail<BF>(w, (n + j) * k + i, mask);
      for (int r = 0; r < M; ++r) acc[r][j] = _mm512_fmadd_ps(xv[r], wv, acc[r][j]);
    }
  }
  for (int r = 0; r < M; ++r)
    for (int j = 0; j < NW; ++j) {
      const float s = _mm512_reduce_add_ps(acc[r][j]);
      y[r * ldy + n + j] = add ? s + add[r * ldy + n + j] : s;
    }
}

template <int M, bool BF>
void rows(const float* x, int64_t k, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy, const float* add) {
  // Up to three x rows: eight W rows at a time (eight prefetched streams), four: six (24
  // accumulators). Probe, one thread, side by side on a loaded Zen 4, f32: m = 1 13.0 -> 16.0
  // GB/s, m = 2 11.3 -> 13.3, m = 3 8.9 -> 12.0, m = 4 9.1 -> 10.5 (from four W rows); bf16 m = 1
  // 7.5 -> 8.6.
  constexpr int NW = M <= 3 ? 8 : 6;
  int64_t n = n0;
  for (; n + NW <= n1; n += NW) block<M, NW, BF>(x, k, w, n, y, ldy, add);
  for (; n < n1; ++n) block<M, 1, BF>(x, k, w, n, y, ldy, add);
}

template <bool BF>
void dispatch(const float* x, int64_t m, int64_t k, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy,
              const float* add) {
  switch (m) {
    case 1: return rows<1, BF>(x, k, w, n0, n1, y, ldy, add);
    case 2: return rows<2, BF>(x, k, w, n0, n1, y, ldy, add);
    case 3: return rows<3, BF>(x, k, w, n0, n1, y, ldy, add);
    default: return rows<4, BF>(x, k, w, n0, n1, y, ldy, add);
  }
}

// bf16 W on a CPU with AVX512_BF16: vdpbf16ps multiplies 32 bf16 of a W row by 32 bf16 of x and
// adds the pairs into 16 f32 lanes, so W is used as loaded (no widening shuffle, half the
// instructions per W byte of the shift-widening form above, which is what bounds it: one thread,
// m = 1, 128 MB of W). x must be given as bf16 (the values of its bf16 rounding, as bf16 compute
// uses anyway). The K tail is a masked load of both (zeros add nothing).
template <int M, int NW>
inline void block_dp(const uint16_t* x, int64_t k, const uint16_t* w, int64_t n, float* y, int64_t ldy,
                     const float* add) {
  __m512 acc[M][NW];
  for (int r = 0; r < M; ++r)
    for (int j = 0; j < NW; ++j) acc[r][j] = _mm512_setzero_ps();
  constexpr int64_t kAheadBytes = 2048;  // probe: 1024 -> 2048 bytes ahead, 11.7 -> 13.3 GB/s
  int64_t i = 0;
  for (; i + 32 <= k; i += 32) {
    for (int j = 0; j < NW; ++j)
      _mm_prefetch(reinterpret_cast<const char*>(w + (n + j) * k + i) + kAheadBytes, _MM_HINT_T0);
    __m512bh xv[M];
    for (int r = 0; r < M; ++r) xv[r] = (__m512bh)_mm512_loadu_si512(x + r * k + i);
    for (int j = 0; j < NW; ++j) {
      const __m512bh wv = (__m512bh)_mm512_loadu_si512(w + (n + j) * k + i);
      for (int r = 0; r < M; ++r) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xv[r], wv);
    }
  }
  if (i < k) {
    const __mmask32 mask = __mmask32((uint64_t(1) << (k - i)) - 1u);
    __m512bh xv[M];
    for (int r = 0; r < M; ++r) xv[r] = (__m512bh)_mm512_maskz_loadu_epi16(mask, x + r * k + i);
    for (int j = 0; j < NW; ++j) {
      const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + (n + j) * k + i);
      for (int r = 0; r < M; ++r) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xv[r], wv);
    }
  }
  for (int r = 0; r < M; ++r)
    for (int j = 0; j < NW; ++j) {
      const float s = _mm512_reduce_add_ps(acc[r][j]);
      y[r * ldy + n + j] = add ? s + add[r * ldy + n + j] : s;
    }
}

// One x row (batch-1 decode): W is read one row after the other, so a thread's share of W is a
// single sequential stream (what the hardware prefetchers follow best), with four accumulators
// over the row (columns 128 i + 32 a .. + 31 in accumulator a) to hide vdpbf16ps's latency, and
// each line prefetched kAheadBytes ahead. Probe (bench/generate/gemv_probe.cpp, one thread, W of
// 128 MB, Xeon with AVX512_BF16): 12.9-14.1 GB/s for the eight-row blocks below, 17.3-18.6 here.
// f32 W does not gain from the same form (14.7 -> 12.8): it keeps the blocks of rows().
inline void row_dp_single(const uint16_t* x, int64_t k, const uint16_t* w, int64_t n0, int64_t n1, float* y,
                          const float* add) {
  constexpr int NA = 4;
  constexpr int64_t kAheadBytes = 2048;
  for (int64_t n = n0; n < n1; ++n) {
    const uint16_t* wr = w + n * k;
    __m512 acc[NA];
    for (int a = 0; a < NA; ++a) acc[a] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 * NA <= k; i += 32 * NA)
      for (int a = 0; a < NA; ++a) {
        _mm_prefetch(reinterpret_cast<const char*>(wr + i + 32 * a) + kAheadBytes, _MM_HINT_T0);
        acc[a] = _mm512_dpbf16_ps(acc[a], (__m512bh)_mm512_loadu_si512(x + i + 32 * a),
                                  (__m512bh)_mm512_loadu_si512(wr + i + 32 * a));
      }
    for (int a = 0; i < k; i += 32, ++a) {  // the rest of the row, whole vectors then a masked one
      const __mmask32 mask = k - i >= 32 ? ~__mmask32(0) : __mmask32((uint64_t(1) << (k - i)) - 1u);
      acc[a] = _mm512_dpbf16_ps(acc[a], (__m512bh)_mm512_maskz_loadu_epi16(mask, x + i),
                                (__m512bh)_mm512_maskz_loadu_epi16(mask, wr + i));
    }
    const __m512 s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    const float v = _mm512_reduce_add_ps(s);
    y[n] = add ? v + add[n] : v;
  }
}

template <int M>
void rows_dp(const uint16_t* x, int64_t k, const uint16_t* w, int64_t n0, int64_t n1, float* y, int64_t ldy,
             const float* add) {
  if constexpr (M == 1) return row_dp_single(x, k, w, n0, n1, y, add);
  constexpr int NW = M <= 3 ? 8 : 6;  // as rows() below
  int64_t n = n0;
  for (; n + NW <= n1; n += NW) block_dp<M, NW>(x, k, w, n, y, ldy, add);
  for (; n < n1; ++n) block_dp<M, 1>(x, k, w, n, y, ldy, add);
}

}  // namespace

void gemv_block_avx512_bf16dp(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n0, int64_t n1,
                              float* y, int64_t ldy, const float* add) {
  switch (m) {
    case 1: return rows_dp<1>(x, k, w, n0, n1, y, ldy, add);
    case 2: return rows_dp<2>(x, k, w, n0, n1, y, ldy, add);
    case 3: return rows_dp<3>(x, k, w, n0, n1, y, ldy, add);
    default: return rows_dp<4>(x, k, w, n0, n1, y, ldy, add);
  }
}

void gemv_block_avx512(const float* x, int64_t m, int64_t k, const void* w, bool w_bf16, int64_t n0, int64_t n1,
                       float* y, int64_t ldy, const float* add) {
  if (w_bf16) dispatch<true>(x, m, k, w, n0, n1, y, ldy, add);
  else dispatch<false>(x, m, k, w, n0, n1, y, ldy, add);
}

}  // namespace titan::detail
