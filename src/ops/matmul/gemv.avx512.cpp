// AVX-512 body of the decode GEMV (ops/matmul/gemv.h; compiled with AVX-512 flags, called only
// after a run-time check).
//
// A thread's W rows [n0, n1) are cut into kStreams contiguous parts read in lockstep, one row of
// each at a time against all m (<= 4) x rows (ops/matmul/gemv_lockstep.h, shared with the AVX2
// body), so that the core keeps kStreams sequential streams in flight; every W line is also
// prefetched kAheadBytes ahead. Measured on 2 threads of the AVX512_BF16 Xeon
// (bench/generate/gemv_probe.cpp 2, W of 512 MiB bf16 / 1 GiB f32, GB/s of weights; the earlier
// forms: m = 1 one row after the other for bf16, blocks of eight adjacent rows otherwise):
//
//   m = 1  f32 26.2 -> 30.1, bf16 widened 22.3 -> 31.5, bf16 vdpbf16ps 26.3 -> 32.5
//
// the rate of a plain read with as many streams (stream_probe: 30-32 with four to eight per
// thread, 19-24 with one). Each W row is summed in one order whichever part it falls in (the rows
// left over after kStreams equal parts run the same code one at a time): NA accumulators of 16
// lanes per x row over the row's columns (step a of a group of NA in accumulator a), added as a
// tree ((a0 + a1) + (a2 + a3)), then one horizontal add; so the bits do not depend on how the
// rows are split over threads.
#include <immintrin.h>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <cstdint>
#include <type_traits>

#include "ops/matmul/gemv.h"
#include "ops/matmul/gemv_lockstep.h"

namespace titan::detail {
namespace {

constexpr int kStreams = 4;
constexpr int64_t kAheadBytes = 1024;  // 2048 and six streams measured the same in decode

// Accumulators per (W row, x row): four for one x row (vdpbf16ps and FMA latency hidden within
// the row), two for two or three, one for four; at most 24 with the x vectors beside them.
template <int M>
constexpr int kNA = M == 1   ? 4
                    : M == 4 ? 1
                             : 2;

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

template <int NA>
inline float reduce_tree(const __m512* a) {
  if constexpr (NA == 1)
    return _mm512_reduce_add_ps(a[0]);
  else if constexpr (NA == 2)
    return _mm512_reduce_add_ps(_mm512_add_ps(a[0], a[1]));
  else
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

// out[s * M + r] = x[r] . W row wr[s] for S W rows, with f32 x and f32 W (BF = false) or bf16 W
// widened to f32 (BF = true): fused multiply-adds over 16 columns per accumulator.
template <int M, int S, bool BF>
inline void dot_rows(const float* x, int64_t k, const void* const* wr, float* out) {
  constexpr int NA = kNA<M>;
  constexpr int64_t es = BF ? 2 : 4;
  __m512 acc[S][M][NA];
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < M; ++r)
      for (int a = 0; a < NA; ++a) acc[s][r][a] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 * NA <= k; i += 16 * NA)
    for (int a = 0; a < NA; ++a) {
      __m512 xv[M];
      for (int r = 0; r < M; ++r) xv[r] = _mm512_loadu_ps(x + r * k + i + 16 * a);
      for (int s = 0; s < S; ++s) {
        const int64_t col = i + 16 * a;
        if (!BF || col % 32 == 0)  // one prefetch per 64-byte line
          _mm_prefetch(static_cast<const char*>(wr[s]) + col * es + kAheadBytes, _MM_HINT_T0);
        const __m512 wv = load_w<BF>(wr[s], col);
        for (int r = 0; r < M; ++r) acc[s][r][a] = _mm512_fmadd_ps(xv[r], wv, acc[s][r][a]);
      }
    }
  for (int a = 0; i < k; i += 16, ++a) {  // the rest of the row: whole vectors, then a masked one
    const __mmask16 mask = k - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (k - i)) - 1u);
    __m512 xv[M];
    for (int r = 0; r < M; ++r) xv[r] = _mm512_maskz_loadu_ps(mask, x + r * k + i);
    for (int s = 0; s < S; ++s) {
      const __m512 wv = load_w_tail<BF>(wr[s], i, mask);
      for (int r = 0; r < M; ++r) acc[s][r][a] = _mm512_fmadd_ps(xv[r], wv, acc[s][r][a]);
    }
  }
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < M; ++r) out[s * M + r] = reduce_tree<NA>(acc[s][r]);
}

// The same for bf16 W and bf16 x on vdpbf16ps (AVX512_BF16 CPUs only): 32 bf16 of a W row times
// 32 of x, the pairs added into 16 f32 lanes, so W is used as loaded (no widening).
template <int M, int S>
inline void dot_rows_dp(const uint16_t* x, int64_t k, const void* const* wr, float* out) {
  constexpr int NA = kNA<M>;
  __m512 acc[S][M][NA];
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < M; ++r)
      for (int a = 0; a < NA; ++a) acc[s][r][a] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 * NA <= k; i += 32 * NA)
    for (int a = 0; a < NA; ++a) {
      __m512bh xv[M];
      for (int r = 0; r < M; ++r) xv[r] = (__m512bh)_mm512_loadu_si512(x + r * k + i + 32 * a);
      for (int s = 0; s < S; ++s) {
        const uint16_t* p = static_cast<const uint16_t*>(wr[s]) + i + 32 * a;
        _mm_prefetch(reinterpret_cast<const char*>(p) + kAheadBytes, _MM_HINT_T0);
        const __m512bh wv = (__m512bh)_mm512_loadu_si512(p);
        for (int r = 0; r < M; ++r) acc[s][r][a] = _mm512_dpbf16_ps(acc[s][r][a], xv[r], wv);
      }
    }
  for (int a = 0; i < k; i += 32, ++a) {
    const __mmask32 mask = k - i >= 32 ? ~__mmask32(0) : __mmask32((uint64_t(1) << (k - i)) - 1u);
    __m512bh xv[M];
    for (int r = 0; r < M; ++r) xv[r] = (__m512bh)_mm512_maskz_loadu_epi16(mask, x + r * k + i);
    for (int s = 0; s < S; ++s) {
      const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(wr[s]) + i);
      for (int r = 0; r < M; ++r) acc[s][r][a] = _mm512_dpbf16_ps(acc[s][r][a], xv[r], wv);
    }
  }
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < M; ++r) out[s * M + r] = reduce_tree<NA>(acc[s][r]);
}

template <bool BF>
void dispatch(const float* x, int64_t m, int64_t k, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy,
              const float* add) {
  gemv_by_rows(m, [&](auto M) {
    constexpr int kM = decltype(M)::value;
    gemv_lockstep<kM, kStreams>(
        static_cast<const char*>(w), k * (BF ? 2 : 4), n0, n1, y, ldy, add,
        [&](auto S, const void* const* wr, float* out) { dot_rows<kM, decltype(S)::value, BF>(x, k, wr, out); });
  });
}

}  // namespace

void gemv_block_avx512_bf16dp(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n0, int64_t n1,
                              float* y, int64_t ldy, const float* add) {
  gemv_by_rows(m, [&](auto M) {
    constexpr int kM = decltype(M)::value;
    gemv_lockstep<kM, kStreams>(
        reinterpret_cast<const char*>(w), k * 2, n0, n1, y, ldy, add,
        [&](auto S, const void* const* wr, float* out) { dot_rows_dp<kM, decltype(S)::value>(x, k, wr, out); });
  });
}

void gemv_block_avx512(const float* x, int64_t m, int64_t k, const void* w, bool w_bf16, int64_t n0, int64_t n1,
                       float* y, int64_t ldy, const float* add) {
  if (w_bf16) dispatch<true>(x, m, k, w, n0, n1, y, ldy, add);
  else dispatch<false>(x, m, k, w, n0, n1, y, ldy, add);
}

}  // namespace titan::detail
