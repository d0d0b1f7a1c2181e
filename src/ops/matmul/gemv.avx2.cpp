// AVX2 + FMA body of the decode GEMV (ops/matmul/gemv.h; the build's baseline, so the path of
// every CPU without AVX-512). The same plan as the AVX-512 body (ops/matmul/gemv_lockstep.h): a
// thread's W rows [n0, n1) are cut into kStreams<M> contiguous parts read in lockstep, one row of
// each at a time against all m (<= 4) x rows, every W line prefetched kAheadBytes ahead, so the
// core keeps several sequential streams in flight instead of one.
//
// Each W row is summed in one order whichever part it falls in: kNA<M> accumulators of 8 lanes per x row over the
// row's columns (step a of a group of kNA in accumulator a; the last partial vector zero-padded),
// added as (a0 + a1), then a fixed horizontal add; so the bits do not depend on how the rows are
// split over threads.
#include "ops/matmul/gemv.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "ops/matmul/gemv_lockstep.h"

namespace titan::detail {
namespace {

constexpr int64_t kAheadBytes = 1024;

// 16 ymm registers: S * M * NA accumulators beside the x vectors (or x read as FMA memory
// operands) and one W vector. Four streams of two accumulators for one x row (eight FMA chains:
// the FMA latency hidden), four of one for two x rows, three of one for three and four. Measured
// on 2 threads of the AMD EPYC (Zen 3, family 25 model 1; bench/generate/gemv_probe.cpp 2, GB/s
// of weights, three runs, against the earlier blocks of 2 or 4 adjacent rows): f32 m = 1 / 3 / 4
// 20.8-23.5 -> 21.8-27.3 / 14.3 -> 24.8-26.6 / 13.3-15.5 -> 18.7-22.4, bf16 13.1-15.2 ->
// 24.0-34.7 / 10.3-11.5 -> 22.8-24.8 / 9.0-9.7 -> 14.7-17.4. With four streams for three and four
// x rows (16 accumulators and more) the rates fell to 11-15; two streams read slower than one on
// that machine (bench/generate/stream_probe.cpp), eight a little faster than four.
template <int M>
constexpr int kStreams = M <= 2 ? 4 : 3;
template <int M>
constexpr int kNA = M == 1 ? 2 : 1;

template <bool BF>
inline __m256 load_w(const void* w, int64_t off) {
  if constexpr (BF) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + off));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(w) + off);
  }
}

// The last n < 8 columns from off, the other lanes zero.
template <bool BF>
inline __m256 load_w_tail(const void* w, int64_t off, int64_t n) {
  alignas(32) float t[8] = {};
  if constexpr (BF) {
    for (int64_t j = 0; j < n; ++j) {
      const uint32_t b = uint32_t(static_cast<const uint16_t*>(w)[off + j]) << 16;
      std::memcpy(&t[j], &b, 4);
    }
  } else {
    std::memcpy(t, static_cast<const float*>(w) + off, size_t(n) * sizeof(float));
  }
  return _mm256_load_ps(t);
}

inline __m256 load_x_tail(const float* x, int64_t n) {
  alignas(32) float t[8] = {};
  std::memcpy(t, x, size_t(n) * sizeof(float));
  return _mm256_load_ps(t);
}

inline float hsum(__m256 v) {  // fixed order: halves, then pairs
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// out[s * M + r] = x[r] . W row wr[s] for S W rows, f32 x, W f32 (BF = false) or bf16 widened.
template <int M, int S, bool BF>
inline void dot_rows(const float* x, int64_t k, const void* const* wr, float* out) {
  constexpr int NA = kNA<M>;
  constexpr int64_t es = BF ? 2 : 4;
  __m256 acc[S][M][NA];
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < M; ++r)
      for (int a = 0; a < NA; ++a) acc[s][r][a] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 * NA <= k; i += 8 * NA)
    for (int a = 0; a < NA; ++a) {
      const int64_t col = i + 8 * a;
      __m256 xv[M];
      for (int r = 0; r < M; ++r) xv[r] = _mm256_loadu_ps(x + r * k + col);
      for (int s = 0; s < S; ++s) {
        if ((col * es) % 64 == 0)  // one prefetch per 64-byte line
          _mm_prefetch(static_cast<const char*>(wr[s]) + col * es + kAheadBytes, _MM_HINT_T0);
        const __m256 wv = load_w<BF>(wr[s], col);
        for (int r = 0; r < M; ++r) acc[s][r][a] = _mm256_fmadd_ps(xv[r], wv, acc[s][r][a]);
      }
    }
  for (int a = 0; i < k; i += 8, ++a) {  // the rest of the row: whole vectors, then a padded one
    const int64_t n = k - i;
    __m256 xv[M];
    for (int r = 0; r < M; ++r) xv[r] = n >= 8 ? _mm256_loadu_ps(x + r * k + i) : load_x_tail(x + r * k + i, n);
    for (int s = 0; s < S; ++s) {
      const __m256 wv = n >= 8 ? load_w<BF>(wr[s], i) : load_w_tail<BF>(wr[s], i, n);
      for (int r = 0; r < M; ++r) acc[s][r][a] = _mm256_fmadd_ps(xv[r], wv, acc[s][r][a]);
    }
  }
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < M; ++r)
      out[s * M + r] = hsum(NA == 1 ? acc[s][r][0] : _mm256_add_ps(acc[s][r][0], acc[s][r][NA - 1]));
}

template <bool BF>
void dispatch(const float* x, int64_t m, int64_t k, const void* w, int64_t n0, int64_t n1, float* y, int64_t ldy,
              const float* add) {
  gemv_by_rows(m, [&](auto M) {
    constexpr int kM = decltype(M)::value;
    gemv_lockstep<kM, kStreams<kM>>(
        static_cast<const char*>(w), k * (BF ? 2 : 4), n0, n1, y, ldy, add,
        [&](auto S, const void* const* wr, float* out) { dot_rows<kM, decltype(S)::value, BF>(x, k, wr, out); });
  });
}

}  // namespace

void gemv_block_avx2(const float* x, int64_t m, int64_t k, const void* w, bool w_bf16, int64_t n0, int64_t n1, float* y,
                     int64_t ldy, const float* add) {
  if (w_bf16)
    dispatch<true>(x, m, k, w, n0, n1, y, ldy, add);
  else
    dispatch<false>(x, m, k, w, n0, n1, y, ldy, add);
}

}  // namespace titan::detail
