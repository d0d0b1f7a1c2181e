// AVX2 building blocks for the cpu kernels (AVX2 + FMA is this build's baseline, x86-64-v3).
// Loops with a float clamp or a sqrt are not vectorized by GCC under the default -ftrapping-math
// and -fmath-errno, so the kernels that need them use these explicit 8-lane helpers, with masked
// loads and stores for the tail so that every element sees exactly the same arithmetic.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace titan::vmath {

// e^x in f32, relative error below 1.1 ulp on [-87.3, 88.3] (measured against double exp); exactly
// 0 below -87.33 (where e^x drops under the smallest normal), saturating at e^88.37 = 2.4e38, NaN
// in -> NaN out. Cody-Waite reduction x = n ln2 + r with |r| <= ln2/2, Cephes' degree-6 minimax
// polynomial for e^r, and 2^n built in the exponent field.
inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(88.37626f);
  const __m256 magic = _mm256_set1_ps(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  // max/min return their second operand when either is NaN, so NaN passes through the clamp.
  const __m256 xc = _mm256_min_ps(hi, _mm256_max_ps(lo, x));
  const __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), magic);
  const __m256i n = _mm256_sub_epi32(_mm256_castps_si256(t), _mm256_castps_si256(magic));
  const __m256 nf = _mm256_sub_ps(t, magic);
  __m256 r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(0.693359375f), xc);  // ln2 = 0.693359375 - 2.12194440e-4
  r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256 scale = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  return _mm256_andnot_ps(under, _mm256_mul_ps(e, scale));
}

// Lane mask selecting the first `count` (0..8) of 8 lanes, for _mm256_maskload_ps/_maskstore_ps.
inline __m256i first_lanes(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// 8 floats to bf16 with round-to-nearest-even and quiet NaNs, bit-identical to f32_to_bf16 of
// core/dtype.h (denormals kept, unlike the AVX-512 BF16 instruction, which flushes them).
inline __m128i bf16x8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i is_nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, is_nan);
  // pack the 32-bit lanes (each < 2^16, so no saturation) and undo the per-128-bit interleave
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  return _mm256_castsi256_si128(packed);
}

// Horizontal sum and max in a fixed order (pairwise halving).
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace titan::vmath
