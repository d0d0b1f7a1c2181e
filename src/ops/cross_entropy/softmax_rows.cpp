// AVX2 row passes of the cross-entropy (see softmax_rows.h). Four 8-lane accumulators per
// reduction, combined in a fixed order, with masked loads for the tail.
#include "ops/cross_entropy/softmax_rows.h"

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "ops/vec_math.h"

namespace titan::ce_detail {
namespace {

using vmath::exp8;
using vmath::first_lanes;

float row_max(const float* z, int64_t V) {
  const __m256 ninf = _mm256_set1_ps(-__builtin_inff());
  __m256 a0 = ninf, a1 = ninf, a2 = ninf, a3 = ninf;
  int64_t v = 0;
  for (; v + 32 <= V; v += 32) {
    a0 = _mm256_max_ps(a0, _mm256_loadu_ps(z + v));
    a1 = _mm256_max_ps(a1, _mm256_loadu_ps(z + v + 8));
    a2 = _mm256_max_ps(a2, _mm256_loadu_ps(z + v + 16));
    a3 = _mm256_max_ps(a3, _mm256_loadu_ps(z + v + 24));
  }
  for (; v < V; v += 8) {
    const __m256i m = first_lanes(V - v);
    a0 = _mm256_max_ps(a0, _mm256_blendv_ps(ninf, _mm256_maskload_ps(z + v, m), _mm256_castsi256_ps(m)));
  }
  return vmath::hmax(_mm256_max_ps(_mm256_max_ps(a0, a1), _mm256_max_ps(a2, a3)));
}

// e^(z - m) for 8 lanes, 0 in the lanes outside the mask.
inline __m256 exp_lanes(const float* z, __m256 m, __m256i mask) {
  return _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(z, mask), m)), _mm256_castsi256_ps(mask));
}

template <bool kStore>
float exp_pass(float* z, int64_t V, float max) {
  const __m256 m = _mm256_set1_ps(max);
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t v = 0;
  for (; v + 32 <= V; v += 32) {
    const __m256 e0 = exp8(_mm256_sub_ps(_mm256_loadu_ps(z + v), m));
    const __m256 e1 = exp8(_mm256_sub_ps(_mm256_loadu_ps(z + v + 8), m));
    const __m256 e2 = exp8(_mm256_sub_ps(_mm256_loadu_ps(z + v + 16), m));
    const __m256 e3 = exp8(_mm256_sub_ps(_mm256_loadu_ps(z + v + 24), m));
    if constexpr (kStore) {
      _mm256_storeu_ps(z + v, e0);
      _mm256_storeu_ps(z + v + 8, e1);
      _mm256_storeu_ps(z + v + 16, e2);
      _mm256_storeu_ps(z + v + 24, e3);
    }
    s0 = _mm256_add_ps(s0, e0);
    s1 = _mm256_add_ps(s1, e1);
    s2 = _mm256_add_ps(s2, e2);
    s3 = _mm256_add_ps(s3, e3);
  }
  for (; v < V; v += 8) {
    const __m256i mask = first_lanes(V - v);
    const __m256 e = exp_lanes(z + v, m, mask);
    if constexpr (kStore) _mm256_maskstore_ps(z + v, mask, e);
    s0 = _mm256_add_ps(s0, e);
  }
  return vmath::hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

float sum_exp(const float* z, int64_t V, float m) { return exp_pass<false>(const_cast<float*>(z), V, m); }
float exp_store(float* z, int64_t V, float m) { return exp_pass<true>(z, V, m); }

void scale(float* z, int64_t V, float c, uint16_t* bf16) {
  const __m256 cv = _mm256_set1_ps(c);
  int64_t v = 0;
  for (; v + 8 <= V; v += 8) {
    const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(z + v), cv);
    if (bf16)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(bf16 + v), vmath::bf16x8(y));
    else
      _mm256_storeu_ps(z + v, y);
  }
  for (; v < V; ++v) {  // tail: the same single multiply, and core's scalar bf16 rounding
    if (bf16)
      bf16[v] = f32_to_bf16(z[v] * c);
    else
      z[v] *= c;
  }
}

const RowOps kAvx2{row_max, sum_exp, exp_store, scale};

}  // namespace

const RowOps& row_ops_avx2() { return kAvx2; }

const RowOps& row_ops() {
  static const RowOps* best = [] {
    const RowOps* a = row_ops_avx512();
    return a && cpu_has_avx512() ? a : &kAvx2;
  }();
  return *best;
}

}  // namespace titan::ce_detail
