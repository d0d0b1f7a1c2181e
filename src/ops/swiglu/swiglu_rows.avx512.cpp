// AVX-512 row kernels of the cpu SwiGLU: cpu.cpp's 8-lane arithmetic on 16 lanes, masked tails.
#include "ops/swiglu/swiglu_rows.h"
#include "ops/vec_math_avx512.h"

namespace titan::swiglu_detail {
namespace {

using vmath512::exp16;
using vmath512::tail_mask;

inline __mmask16 lanes(int64_t left) { return left >= 16 ? __mmask16(0xffff) : tail_mask(left); }

void forward(const float* g, const float* u, float* y, int64_t I) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t j = 0; j < I; j += 16) {
    const __mmask16 k = lanes(I - j);
    const __m512 gv = _mm512_maskz_loadu_ps(k, g + j);
    const __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
    _mm512_mask_storeu_ps(y + j, k, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(k, u + j)));
  }
}

void backward(const float* g, const float* u, const float* dy, float* dg, float* du, int64_t I) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t j = 0; j < I; j += 16) {
    const __mmask16 k = lanes(I - j);
    const __m512 gv = _mm512_maskz_loadu_ps(k, g + j), uv = _mm512_maskz_loadu_ps(k, u + j);
    const __m512 dv = _mm512_maskz_loadu_ps(k, dy + j);
    const __m512 s = _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
    const __m512 dsilu = _mm512_add_ps(one, _mm512_mul_ps(gv, _mm512_sub_ps(one, s)));
    _mm512_mask_storeu_ps(dg + j, k, _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dv, uv), s), dsilu));
    _mm512_mask_storeu_ps(du + j, k, _mm512_mul_ps(_mm512_mul_ps(dv, gv), s));
  }
}

const RowFns kAvx512{forward, backward};

}  // namespace

const RowFns* rows_avx512() { return &kAvx512; }

}  // namespace titan::swiglu_detail
