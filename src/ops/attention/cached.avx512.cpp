// AVX-512 passes of attention_cached (cached_kernels.h; compiled with AVX-512 flags, called only
// after a run-time check).
//
// A bf16 cache is used as loaded, without a widening shuffle: a 64-byte line holds 32 bf16, and
// as 16 dwords its lanes are (element 2i + 1) << 16 | element 2i, so `line << 16` is the even
// elements as f32 and `line & 0xffff0000` the odd ones. q is split into its even and odd columns
// once per call (scores), and p.V accumulates even and odd output columns apart and interleaves
// them at the end; every FMA then does 16 useful products and the passes are bound by the FMA
// ports, not by the one shuffle port the AVX2 form widens on. The same f32 arithmetic as the AVX2
// form, in another summation order.
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <algorithm>
#include <cstdint>

#include "ops/attention/cached_kernels.h"

namespace titan::detail {
namespace {

constexpr int kKeys = 8;  // keys per score block

// Eight accumulators of 16 lanes to one vector of their eight sums (lane t: sum of acc[t]).
inline __m256 reduce8x16(const __m512* acc) {
  __m256 h[8];
  for (int t = 0; t < 8; ++t)
    h[t] = _mm256_add_ps(_mm512_castps512_ps256(acc[t]),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[t]), 1)));
  const __m256 h01 = _mm256_hadd_ps(h[0], h[1]), h23 = _mm256_hadd_ps(h[2], h[3]);
  const __m256 h45 = _mm256_hadd_ps(h[4], h[5]), h67 = _mm256_hadd_ps(h[6], h[7]);
  const __m256 q0123 = _mm256_hadd_ps(h01, h23), q4567 = _mm256_hadd_ps(h45, h67);
  const __m256 lo = _mm256_permute2f128_ps(q0123, q4567, 0x20), hi = _mm256_permute2f128_ps(q0123, q4567, 0x31);
  return _mm256_add_ps(lo, hi);
}

inline __m512 even_f32(__m512i line) { return _mm512_castsi512_ps(_mm512_slli_epi32(line, 16)); }
inline __m512 odd_f32(__m512i line) {
  return _mm512_castsi512_ps(_mm512_and_si512(line, _mm512_set1_epi32(int32_t(0xffff0000u))));
}

// Scores of U (1 or 2) heads. bf16: q split into even/odd halves per 32 columns (qs[u][2 b] even,
// [2 b + 1] odd, 16 each); f32: q as given, 16 columns per vector.
template <int U, bool BF>
void scores_t(const float* const* q, const void* kp, int64_t nk, int64_t D, float scale, float* p, int64_t ldp,
              const void* vpf) {
  constexpr int64_t es = BF ? 2 : 4;
  const int64_t nb = BF ? D / 32 : D / 16;  // column blocks of one line of K
  alignas(64) float qs[U][kCachedAvx512MaxD];  // cached_avx512_fits(D), checked by the caller
  for (int u = 0; u < U; ++u) {
    if constexpr (BF) {
      const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
      for (int64_t b = 0; b < nb; ++b) {
        const __m512 a = _mm512_loadu_ps(q[u] + 32 * b), c = _mm512_loadu_ps(q[u] + 32 * b + 16);
        _mm512_store_ps(qs[u] + 32 * b, _mm512_permutex2var_ps(a, ev, c));
        _mm512_store_ps(qs[u] + 32 * b + 16, _mm512_permutex2var_ps(a, od, c));
      }
    } else {
      for (int64_t c = 0; c < D; ++c) qs[u][c] = q[u][c];
    }
  }
  const char* k = static_cast<const char*>(kp);
  const int64_t row = D * es, block = kKeys * row;
  const __m256 sv = _mm256_set1_ps(scale);
  int64_t j = 0;
  for (; j + kKeys <= nk; j += kKeys) {
    const char* kb = k + j * row;
    for (int64_t o = 0; o < block; o += 64) {
      _mm_prefetch(kb + 2 * block + o, _MM_HINT_T0);
      if (vpf) _mm_prefetch(static_cast<const char*>(vpf) + j * row + o, _MM_HINT_T1);
    }
    __m512 acc[U][kKeys];
    for (int u = 0; u < U; ++u)
      for (int t = 0; t < kKeys; ++t) acc[u][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b)
      for (int t = 0; t < kKeys; ++t) {
        if constexpr (BF) {
          const __m512i line = _mm512_loadu_si512(kb + t * row + 64 * b);
          const __m512 ke = even_f32(line), ko = odd_f32(line);
          for (int u = 0; u < U; ++u) {
            acc[u][t] = _mm512_fmadd_ps(_mm512_load_ps(qs[u] + 32 * b), ke, acc[u][t]);
            acc[u][t] = _mm512_fmadd_ps(_mm512_load_ps(qs[u] + 32 * b + 16), ko, acc[u][t]);
          }
        } else {
          const __m512 kv = _mm512_loadu_ps(reinterpret_cast<const float*>(kb + t * row) + 16 * b);
          for (int u = 0; u < U; ++u) acc[u][t] = _mm512_fmadd_ps(_mm512_load_ps(qs[u] + 16 * b), kv, acc[u][t]);
        }
      }
    for (int u = 0; u < U; ++u) _mm256_storeu_ps(p + u * ldp + j, _mm256_mul_ps(sv, reduce8x16(acc[u])));
  }
  for (; j < nk; ++j) {  // the last keys one at a time
    __m512 acc[U];
    for (int u = 0; u < U; ++u) acc[u] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      if constexpr (BF) {
        const __m512i line = _mm512_loadu_si512(k + j * row + 64 * b);
        for (int u = 0; u < U; ++u) {
          acc[u] = _mm512_fmadd_ps(_mm512_load_ps(qs[u] + 32 * b), even_f32(line), acc[u]);
          acc[u] = _mm512_fmadd_ps(_mm512_load_ps(qs[u] + 32 * b + 16), odd_f32(line), acc[u]);
        }
      } else {
        const __m512 kv = _mm512_loadu_ps(reinterpret_cast<const float*>(k + j * row) + 16 * b);
        for (int u = 0; u < U; ++u) acc[u] = _mm512_fmadd_ps(_mm512_load_ps(qs[u] + 16 * b), kv, acc[u]);
      }
    }
    for (int u = 0; u < U; ++u) p[u * ldp + j] = scale * _mm512_reduce_add_ps(acc[u]);
  }
}

// o[u * D + c] = sum_j p[u * ldp + j] v_j[c] for U (1 or 2) heads, 128 columns per pass over the
// keys (16 accumulators at U = 2).
template <int U, bool BF>
void weighted_t(const float* p, int64_t ldp, const void* vp, int64_t nk, int64_t D, float* o) {
  constexpr int64_t es = BF ? 2 : 4;
  const char* v = static_cast<const char*>(vp);
  const int64_t row = D * es;
  for (int64_t c0 = 0; c0 < D; c0 += 128) {
    const int64_t nv = std::min<int64_t>(128, D - c0) / 16;  // 16-lane accumulators per head (<= 8)
    __m512 acc[U][8];
    for (int u = 0; u < U; ++u)
      for (int a = 0; a < 8; ++a) acc[u][a] = _mm512_setzero_ps();
    for (int64_t j = 0; j < nk; ++j) {
      const char* vj = v + j * row + c0 * es;
      __m512 w[U];
      for (int u = 0; u < U; ++u) w[u] = _mm512_set1_ps(p[u * ldp + j]);
      if constexpr (BF) {
        for (int64_t a = 0; a < nv; a += 2) {  // one line: even columns into acc a, odd into a + 1
          const __m512i line = _mm512_loadu_si512(vj + 32 * a);
          const __m512 ve = even_f32(line), vo = odd_f32(line);
          for (int u = 0; u < U; ++u) {
            acc[u][a] = _mm512_fmadd_ps(w[u], ve, acc[u][a]);
            acc[u][a + 1] = _mm512_fmadd_ps(w[u], vo, acc[u][a + 1]);
          }
        }
      } else {
        for (int64_t a = 0; a < nv; ++a) {
          const __m512 vv = _mm512_loadu_ps(reinterpret_cast<const float*>(vj) + 16 * a);
          for (int u = 0; u < U; ++u) acc[u][a] = _mm512_fmadd_ps(w[u], vv, acc[u][a]);
        }
      }
    }
    for (int u = 0; u < U; ++u) {
      float* ou = o + u * D + c0;
      if constexpr (BF) {
        const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        for (int64_t a = 0; a < nv; a += 2) {
          _mm512_storeu_ps(ou + 16 * a, _mm512_permutex2var_ps(acc[u][a], lo, acc[u][a + 1]));
          _mm512_storeu_ps(ou + 16 * a + 16, _mm512_permutex2var_ps(acc[u][a], hi, acc[u][a + 1]));
        }
      } else {
        for (int64_t a = 0; a < nv; ++a) _mm512_storeu_ps(ou + 16 * a, acc[u][a]);
      }
    }
  }
}

}  // namespace

void cached_scores_avx512(const float* const* q, int U, const void* k, bool bf16, int64_t nk, int64_t D, float scale,
                          float* p, int64_t ldp, const void* vpf) {
  if (bf16)
    U == 2 ? scores_t<2, true>(q, k, nk, D, scale, p, ldp, vpf) : scores_t<1, true>(q, k, nk, D, scale, p, ldp, vpf);
  else
    U == 2 ? scores_t<2, false>(q, k, nk, D, scale, p, ldp, vpf) : scores_t<1, false>(q, k, nk, D, scale, p, ldp, vpf);
}

void cached_weighted_avx512(const float* p, int64_t ldp, int U, const void* v, bool bf16, int64_t nk, int64_t D,
                            float* o) {
  if (bf16)
    U == 2 ? weighted_t<2, true>(p, ldp, v, nk, D, o) : weighted_t<1, true>(p, ldp, v, nk, D, o);
  else
    U == 2 ? weighted_t<2, false>(p, ldp, v, nk, D, o) : weighted_t<1, false>(p, ldp, v, nk, D, o);
}

}  // namespace titan::detail
