// AVX-512 tile primitives. The GEMM is a register-blocked micro-kernel: up to 6 rows of C times up
// to 4 vectors (64 columns) held in 24 zmm accumulators; each step over k loads one row of B (the
// last vector masked for column counts not a multiple of 16) and broadcasts one A element per row.
// exp is the Cephes expf scheme: n = round(x log2 e), r = x - n ln2 (two-part ln2, Cody-Waite),
// exp(r) by a degree-7 polynomial (Cephes coefficients, about 1 ulp), times 2^n via vscalefps;
// inputs below ln(FLT_MIN) (including -inf) give exactly 0.
// GCC 12's AVX-512 headers build the "undefined" pass-through operand of max/min/scalef/roundscale
// as `__m512 __Y = __Y;`, which -Wuninitialized reports once inlined (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "ops/attention/tiles.h"

namespace titan::attention {
namespace {

inline __m512 exp_ps(__m512 x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_GE_OQ);
  x = _mm512_min_ps(x, _mm512_set1_ps(88.72283f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_maskz_mov_ps(keep, _mm512_scalef_ps(p, n));
}

// Lanes i of vector v (query 16 v + i) that are masked for key row j on the diagonal block: i < j.
inline __mmask16 causal_masked(int j, int v) {
  const int below = std::clamp(j - 16 * v, 0, 16);  // lanes 0 .. below-1 are masked
  return __mmask16((1u << below) - 1u);
}

template <int R, int NV>
void micro(int64_t K, const float* a, int64_t a_rs, int64_t a_ks, const float* b, int64_t ldb, float* c, int64_t ldc,
           bool accumulate, __mmask16 tail) {
  __m512 acc[R][NV];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      const __mmask16 mk = v == NV - 1 ? tail : __mmask16(0xffff);
      acc[r][v] = accumulate ? _mm512_maskz_loadu_ps(mk, c + r * ldc + 16 * v) : _mm512_setzero_ps();
    }
  for (int64_t k = 0; k < K; ++k, b += ldb, a += a_ks) {
    __m512 bv[NV];
    #pragma GCC unroll 8
    for (int v = 0; v < NV - 1; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
    bv[NV - 1] = _mm512_maskz_loadu_ps(tail, b + 16 * (NV - 1));
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(a[r * a_rs]);
      #pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
    }
  }
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 8
    for (int v = 0; v < NV - 1; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
    _mm512_mask_storeu_ps(c + r * ldc + 16 * (NV - 1), tail, acc[r][NV - 1]);
  }
}

using MicroFn = void (*)(int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, bool,
                         __mmask16);

template <int R>
constexpr MicroFn pick_nv(int nv) {
  return nv == 1 ? micro<R, 1> : nv == 2 ? micro<R, 2> : nv == 3 ? micro<R, 3> : micro<R, 4>;
}
MicroFn pick(int rows, int nv) {
  switch (rows) {
    case 1: return pick_nv<1>(nv);
    case 2: return pick_nv<2>(nv);
    case 3: return pick_nv<3>(nv);
    case 4: return pick_nv<4>(nv);
    case 5: return pick_nv<5>(nv);
    default: return pick_nv<6>(nv);
  }
}

void gemm_avx512(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs, int64_t a_ks, const float* b,
                 int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  constexpr int64_t R = 6;
  for (int64_t n0 = 0; n0 < N; n0 += kTile) {
    const int nw = int(std::min<int64_t>(kTile, N - n0));
    const int nv = (nw + 15) / 16;
    const __mmask16 tail = __mmask16((1u << (nw - 16 * (nv - 1))) - 1u);  // 1..16 lanes
    const MicroFn full = pick(int(R), nv);
    int64_t m0 = 0;
    for (; m0 + R <= M; m0 += R)
      full(K, a + m0 * a_rs, a_rs, a_ks, b + n0, ldb, c + m0 * ldc + n0, ldc, accumulate, tail);
    if (m0 < M)
      pick(int(M - m0), nv)(K, a + m0 * a_rs, a_rs, a_ks, b + n0, ldb, c + m0 * ldc + n0, ldc, accumulate, tail);
  }
}

constexpr int kVecs = kTile / 16;

void softmax_step_avx512(float* st, int kn, bool diagonal, float* m, float* l, float* alpha) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  __m512 mx[kVecs], sum[kVecs];
  for (int v = 0; v < kVecs; ++v) {
    mx[v] = _mm512_loadu_ps(m + 16 * v);
    sum[v] = _mm512_setzero_ps();
  }
  for (int j = 0; j < kn; ++j) {
    float* row = st + j * kTile;
    for (int v = 0; v < kVecs; ++v) {
      __m512 s = _mm512_loadu_ps(row + 16 * v);
      if (diagonal) {
        s = _mm512_mask_mov_ps(s, causal_masked(j, v), ninf);
        _mm512_storeu_ps(row + 16 * v, s);
      }
      mx[v] = _mm512_max_ps(mx[v], s);
    }
  }
  for (int j = 0; j < kn; ++j) {
    float* row = st + j * kTile;
    for (int v = 0; v < kVecs; ++v) {
      const __m512 p = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(row + 16 * v), mx[v]));
      _mm512_storeu_ps(row + 16 * v, p);
      sum[v] = _mm512_add_ps(sum[v], p);
    }
  }
  for (int v = 0; v < kVecs; ++v) {
    const __m512 al = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(m + 16 * v), mx[v]));
    _mm512_storeu_ps(alpha + 16 * v, al);
    _mm512_storeu_ps(l + 16 * v, _mm512_fmadd_ps(al, _mm512_loadu_ps(l + 16 * v), sum[v]));
    _mm512_storeu_ps(m + 16 * v, mx[v]);
  }
}

void backward_step_avx512(float* st, float* dpt, int kn, bool diagonal, const float* lse, const float* dsum,
                          float scale) {
  const __m512 sc = _mm512_set1_ps(scale);
  __m512 ls[kVecs], ds[kVecs];
  for (int v = 0; v < kVecs; ++v) {
    ls[v] = _mm512_loadu_ps(lse + 16 * v);
    ds[v] = _mm512_loadu_ps(dsum + 16 * v);
  }
  for (int j = 0; j < kn; ++j) {
    float* prow = st + j * kTile;
    float* drow = dpt + j * kTile;
    for (int v = 0; v < kVecs; ++v) {
      // Masked entries (which may hold stale values on the diagonal block) become exactly 0.
      const __mmask16 keep = diagonal ? __mmask16(~causal_masked(j, v)) : __mmask16(0xffff);
      const __m512 p = exp_ps(_mm512_maskz_sub_ps(keep, _mm512_loadu_ps(prow + 16 * v), ls[v]));
      const __m512 d = _mm512_maskz_sub_ps(keep, _mm512_loadu_ps(drow + 16 * v), ds[v]);
      _mm512_storeu_ps(prow + 16 * v, _mm512_maskz_mov_ps(keep, p));
      _mm512_storeu_ps(drow + 16 * v, _mm512_mul_ps(_mm512_mul_ps(sc, p), d));
    }
  }
}

}  // namespace

const TileOps& tile_ops_avx512() {
  static const TileOps ops{"avx512", gemm_avx512, softmax_step_avx512, backward_step_avx512};
  return ops;
}

}  // namespace titan::attention
