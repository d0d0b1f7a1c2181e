// Philox::normals on AVX2 + FMA: four counters at a time, each lane the exact arithmetic of
// rng_detail::box_muller (core/rng_normal.h) and then std::fma(std, z, mean), so the bits equal
// the scalar form's. Built for
// x86-64-v3 with contraction allowed (CMakeLists.txt): no product here feeds an addition except
// where the product is exact or the code already fuses it, so contraction changes no result.
#include "core/rng.h"

#include <immintrin.h>

#include "core/rng_normal.h"

namespace titan::rng_detail {

namespace {

// A vector of small non-negative 64-bit integers (< 2^52) as doubles, exactly.
inline __m256d small_u64_to_f64(__m256i v) {
  const __m256i magic = _mm256_set1_epi64x(0x4330000000000000ll);  // 2^52
  return _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(v, magic)), _mm256_set1_pd(0x1p52));
}

}  // namespace

int64_t normals_avx2(const Philox& rng, uint64_t first, int64_t n, double* out, double std, double mean) {
  const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFFll);
  const __m256i m0 = _mm256_set1_epi64x(0xD2511F53ll), m1 = _mm256_set1_epi64x(0xCD9E8D57ll);
  const __m256i stream_lo = _mm256_set1_epi64x(int64_t(uint32_t(rng.stream)));
  const __m256i stream_hi = _mm256_set1_epi64x(int64_t(uint32_t(rng.stream >> 32)));
  const int64_t whole = n - n % 4;
  for (int64_t j = 0; j < whole; j += 4) {
    const uint64_t c = first + uint64_t(j);
    const __m256i ctr = _mm256_set_epi64x(int64_t(c + 3), int64_t(c + 2), int64_t(c + 1), int64_t(c));
    // Philox4x32-10, each 32-bit word in the low half of a 64-bit lane.
    __m256i c0 = _mm256_and_si256(ctr, lo32), c1 = _mm256_srli_epi64(ctr, 32), c2 = stream_lo, c3 = stream_hi;
    uint32_t k0 = uint32_t(rng.seed), k1 = uint32_t(rng.seed >> 32);
    for (int r = 0; r < 10; ++r) {
      const __m256i p0 = _mm256_mul_epu32(c0, m0), p1 = _mm256_mul_epu32(c2, m1);
      const __m256i n0 =
          _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1), _mm256_set1_epi64x(int64_t(k0)));
      const __m256i n2 =
          _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3), _mm256_set1_epi64x(int64_t(k1)));
      c1 = _mm256_and_si256(p1, lo32);
      c3 = _mm256_and_si256(p0, lo32);
      c0 = n0;
      c2 = n2;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    // u1 from the 53 bits (w0 << 21) ^ w1, as two exact halves; u2 from w2.
    const __m256i v = _mm256_xor_si256(_mm256_slli_epi64(c0, 21), c1);
    const __m256d dv = _mm256_add_pd(_mm256_mul_pd(small_u64_to_f64(_mm256_srli_epi64(v, 32)), _mm256_set1_pd(0x1p32)),
                                     small_u64_to_f64(_mm256_and_si256(v, lo32)));  // exact: < 2^53
    const __m256d u1 = _mm256_mul_pd(_mm256_add_pd(dv, _mm256_set1_pd(0.5)), _mm256_set1_pd(kTwoM53));
    const __m256d u2 = _mm256_mul_pd(_mm256_add_pd(small_u64_to_f64(c2), _mm256_set1_pd(0.5)), _mm256_set1_pd(kTwoM32));
    // log(u1)
    const __m256i bits = _mm256_castpd_si256(u1);
    __m256d e = _mm256_sub_pd(small_u64_to_f64(_mm256_srli_epi64(bits, 52)), _mm256_set1_pd(1023.0));
    __m256d m = _mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi64x(0x000FFFFFFFFFFFFFll)),
                                                    _mm256_set1_epi64x(0x3FF0000000000000ll)));
    const __m256d big = _mm256_cmp_pd(m, _mm256_set1_pd(kSqrt2), _CMP_GT_OQ);
    m = _mm256_blendv_pd(m, _mm256_mul_pd(m, _mm256_set1_pd(0.5)), big);
    e = _mm256_add_pd(e, _mm256_and_pd(big, _mm256_set1_pd(1.0)));
    const __m256d one = _mm256_set1_pd(1.0);
    const __m256d s = _mm256_div_pd(_mm256_sub_pd(m, one), _mm256_add_pd(m, one));
    const __m256d w2 = _mm256_mul_pd(s, s), s2 = _mm256_mul_pd(_mm256_set1_pd(2.0), s);
    __m256d q = _mm256_set1_pd(kAtanh[10]);
    for (int k = 9; k >= 0; --k) q = _mm256_fmadd_pd(q, w2, _mm256_set1_pd(kAtanh[k]));
    const __m256d log_m = _mm256_fmadd_pd(_mm256_mul_pd(s2, w2), q, s2);
    const __m256d log_u1 =
        _mm256_fmadd_pd(e, _mm256_set1_pd(kLn2Hi), _mm256_fmadd_pd(e, _mm256_set1_pd(kLn2Lo), log_m));
    // cos(2 pi u2)
    const __m256i q4 = _mm256_srli_epi64(_mm256_add_epi64(c2, _mm256_set1_epi64x(1ll << 29)), 30);
    const __m256d t = _mm256_sub_pd(u2, _mm256_mul_pd(small_u64_to_f64(q4), _mm256_set1_pd(0.25)));  // exact
    const __m256d t2 = _mm256_mul_pd(t, t);
    __m256d cv = _mm256_set1_pd(kCos[8]), sv = _mm256_set1_pd(kSin[8]);
    for (int k = 7; k >= 0; --k) {
      cv = _mm256_fmadd_pd(cv, t2, _mm256_set1_pd(kCos[k]));
      sv = _mm256_fmadd_pd(sv, t2, _mm256_set1_pd(kSin[k]));
    }
    sv = _mm256_mul_pd(sv, t);
    const __m256i odd = _mm256_cmpeq_epi64(_mm256_and_si256(q4, _mm256_set1_epi64x(1)), _mm256_set1_epi64x(1));
    const __m256d cs = _mm256_blendv_pd(cv, sv, _mm256_castsi256_pd(odd));
    // Negative in quadrants 1 and 2: bit 1 of q4 + 1, moved to the sign bit.
    const __m256i sign =
        _mm256_slli_epi64(_mm256_and_si256(_mm256_add_epi64(q4, _mm256_set1_epi64x(1)), _mm256_set1_epi64x(2)), 62);
    const __m256d r = _mm256_sqrt_pd(_mm256_mul_pd(_mm256_set1_pd(-2.0), log_u1));
    const __m256d z = _mm256_mul_pd(r, _mm256_xor_pd(cs, _mm256_castsi256_pd(sign)));
    _mm256_storeu_pd(out + j, _mm256_fmadd_pd(_mm256_set1_pd(std), z, _mm256_set1_pd(mean)));
  }
  return whole;
}

}  // namespace titan::rng_detail
