// AVX-512 row passes of the cross-entropy (see softmax_rows.h), 16 lanes and masked tails.
// Compiled with AVX-512 flags and only reached through row_ops() after a run-time CPU check.
#include "ops/cross_entropy/softmax_rows.h"
#include "ops/vec_math_avx512.h"

namespace titan::ce_detail {
namespace {

using vmath512::bf16x16;
using vmath512::exp16;
using vmath512::tail_mask;

float row_max(const float* z, int64_t V) {
  const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
  __m512 a0 = ninf, a1 = ninf, a2 = ninf, a3 = ninf;
  int64_t v = 0;
  for (; v + 64 <= V; v += 64) {
    a0 = _mm512_max_ps(a0, _mm512_loadu_ps(z + v));
    a1 = _mm512_max_ps(a1, _mm512_loadu_ps(z + v + 16));
    a2 = _mm512_max_ps(a2, _mm512_loadu_ps(z + v + 32));
    a3 = _mm512_max_ps(a3, _mm512_loadu_ps(z + v + 48));
  }
  for (; v < V; v += 16) {
    const __mmask16 m = V - v >= 16 ? __mmask16(0xffff) : tail_mask(V - v);
    a0 = _mm512_max_ps(a0, _mm512_mask_loadu_ps(ninf, m, z + v));
  }
  return _mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_max_ps(a2, a3)));
}

template <bool kStore>
float exp_pass(float* z, int64_t V, float max) {
  const __m512 m = _mm512_set1_ps(max);
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t v = 0;
  for (; v + 64 <= V; v += 64) {
    const __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(z + v), m));
    const __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(z + v + 16), m));
    const __m512 e2 = exp16(_mm512_sub_ps(_mm512_loadu_ps(z + v + 32), m));
    const __m512 e3 = exp16(_mm512_sub_ps(_mm512_loadu_ps(z + v + 48), m));
    if constexpr (kStore) {
      _mm512_storeu_ps(z + v, e0);
      _mm512_storeu_ps(z + v + 16, e1);
      _mm512_storeu_ps(z + v + 32, e2);
      _mm512_storeu_ps(z + v + 48, e3);
    }
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
    s2 = _mm512_add_ps(s2, e2);
    s3 = _mm512_add_ps(s3, e3);
  }
  for (; v < V; v += 16) {
    const __mmask16 k = V - v >= 16 ? __mmask16(0xffff) : tail_mask(V - v);
    const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, z + v), m)));
    if constexpr (kStore) _mm512_mask_storeu_ps(z + v, k, e);
    s0 = _mm512_add_ps(s0, e);
  }
  // fixed-order reduction: the four accumulators pairwise, then the 16 lanes by halving
  __m512 s = _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
  __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

float sum_exp(const float* z, int64_t V, float m) { return exp_pass<false>(const_cast<float*>(z), V, m); }
float exp_store(float* z, int64_t V, float m) { return exp_pass<true>(z, V, m); }

void scale(float* z, int64_t V, float c, uint16_t* bf16) {
  const __m512 cv = _mm512_set1_ps(c);
  for (int64_t v = 0; v < V; v += 16) {
    const __mmask16 k = V - v >= 16 ? __mmask16(0xffff) : tail_mask(V - v);
    const __m512 y = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, z + v), cv);
    if (bf16)
      _mm256_mask_storeu_epi16(bf16 + v, k, bf16x16(y));
    else
      _mm512_mask_storeu_ps(z + v, k, y);
  }
}

const RowOps kAvx512{row_max, sum_exp, exp_store, scale};

}  // namespace

const RowOps* row_ops_avx512() { return &kAvx512; }

}  // namespace titan::ce_detail
