// AVX-512 counterparts of vec_math.h, for *.avx512.cpp files only (compiled with AVX-512 flags and
// called after a run-time CPU check). Include this header from no other file and no header with
// inline functions shared with baseline files into those files: the linker keeps one copy of an
// inline function, and an AVX-512 copy picked for everyone would fault on AVX2-only CPUs.
#pragma once
// GCC 12's avx512fintrin.h initializes its "undefined" vectors from themselves, which
// -Wuninitialized reports inside the header's inline functions (a false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

namespace titan::vmath512 {

// vec_math.h's exp8 on 16 lanes: the same constants and operations, so the same bits per lane.
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(88.37626f);
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  const __m512 xc = _mm512_min_ps(hi, _mm512_max_ps(lo, x));  // NaN passes (second operand)
  const __m512 t = _mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), magic);
  const __m512i n = _mm512_sub_epi32(_mm512_castps_si512(t), _mm512_castps_si512(magic));
  const __m512 nf = _mm512_sub_ps(t, magic);
  __m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512 scale = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);  // not below the range (NaN kept)
  return _mm512_maskz_mul_ps(keep, e, scale);
}

// Mask of the first `count` (0..16) lanes.
inline __mmask16 tail_mask(int64_t count) { return __mmask16((1u << count) - 1u); }

// RNE to bf16 with quiet NaNs, as core's f32_to_bf16 (denormals kept).
inline __m256i bf16x16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  const __mmask16 is_nan =
      _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(is_nan, rounded, quiet));
}

}  // namespace titan::vmath512
