// attention_cached (cached.h): one task per (row, kv head, query); the kv head's group of query
// heads is done together so each cached key and value row is read once per query token. Scores
// for the visible keys go to a per-thread buffer, then one softmax and one weighted sum of V rows
// (two passes over the keys).
//
// The passes are explicit AVX2 (this build's baseline): q.k for eight keys at a time into eight
// accumulators reduced together (lane c % 8 of key j sums q[c] k_j[c] over c, then the pairs,
// quads and halves: the order of the scalar 8-part dot product it replaces), the softmax's
// exponentials eight at a time (exp8, vec_math.h), and p.V with the output rows of up to three
// query heads held in registers 32 columns at a time. Measured on the Qwen3-0.6B-shaped bench
// model, 2 threads, 256 new tokens after a 512-token prompt (perf): this function was 22% of a
// bf16 decode step as plain C++ (GCC's vectorisation of the dot product and a scalar exp).
//
// The cache is [B, Hkv, cap, D] (model/inference_state.h): one task's keys and values are two
// contiguous blocks. In the former [B, cap, Hkv, D] consecutive keys of a head were Hkv * D floats
// apart (4 KiB on Qwen3-0.6B, a page per key). With bf16 weights the cache is bf16 (half the
// bytes), widened to f32 as loaded. perf of a bf16 decode (128 new tokens after 512, 2 threads,
// whole run, machine loaded; two before/after pairs): this function 14.8% (old layout, f32
// cache) -> 10.2% (new layout), and 13.5% -> 6.8% (new layout, bf16 cache). Doing p.V in chunks
// of 32 keys (each chunk's V rows re-read from L1 for the other 32-column blocks) changed nothing
// measurable and is not kept.
//
// The first head's q.k pass prefetches the keys two 8-key blocks ahead and the same keys' values
// into L2 for the p.V pass: bf16 decode after a 1024-token prompt 17.2 -> 18.2-19.0 tokens/s (2
// threads, the Xeon). On AVX-512 CPUs the passes are cached.avx512.cpp's (a pair of heads per
// pass over the keys, bf16 used as loaded): 1024-token prompt, bf16 19.1-19.5 -> 19.5-19.8, f32
// 10.0 -> 10.5 tokens/s; the whole attention now reads the cache at about 80% of the GEMV's
// bytes per second.
#include "ops/attention/cached.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "core/team.h"
#include "ops/attention/cached_kernels.h"
#include "ops/vec_math.h"

namespace titan {
namespace {

using namespace vmath;

// The 8-lane sum of each of eight accumulators, as one vector: lane i = ((a0+a1)+(a2+a3)) +
// ((a4+a5)+(a6+a7)) of acc[i].
inline __m256 reduce8(const __m256* acc) {
  const __m256 h01 = _mm256_hadd_ps(acc[0], acc[1]), h23 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 h45 = _mm256_hadd_ps(acc[4], acc[5]), h67 = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 q0123 = _mm256_hadd_ps(h01, h23), q4567 = _mm256_hadd_ps(h45, h67);
  // q0123 lanes: [a0 lo, a1 lo, a2 lo, a3 lo, a0 hi, a1 hi, a2 hi, a3 hi] (lo: columns 0..3 summed)
  const __m256 lo = _mm256_permute2f128_ps(q0123, q4567, 0x20), hi = _mm256_permute2f128_ps(q0123, q4567, 0x31);
  return _mm256_add_ps(lo, hi);
}

// Cache elements (f32 or bf16) as f32: one, or eight from p.
inline float f32_of(float x) { return x; }
inline float f32_of(bf16 x) { return bf16_to_f32(x.bits); }
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const bf16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <class T>
inline float dot(const float* __restrict a, const T* __restrict b, int64_t n) {
  float part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; ++u) part[u] += a[i + u] * f32_of(b[i + u]);
  for (; i < n; ++i) part[0] += a[i] * f32_of(b[i]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// p[j] = scale * q.k_j for the nk keys k_j = k + j * D (one kv head's keys, contiguous).
template <class T>
void scores(const float* q, const T* k, int64_t nk, int64_t D, float scale, float* p, const T* vpf) {
  int64_t j = 0;
  if (D % 8 == 0) {
    const __m256 sv = _mm256_set1_ps(scale);
    const int64_t block_bytes = 8 * D * int64_t(sizeof(T));
    for (; j + 8 <= nk; j += 8) {
      for (int64_t o = 0; o < block_bytes; o += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(k + j * D) + 2 * block_bytes + o, _MM_HINT_T0);
        if (vpf) _mm_prefetch(reinterpret_cast<const char*>(vpf + j * D) + o, _MM_HINT_T1);
      }
      __m256 acc[8];
      for (int t = 0; t < 8; ++t) acc[t] = _mm256_setzero_ps();
      for (int64_t c = 0; c < D; c += 8) {
        const __m256 qv = _mm256_loadu_ps(q + c);
        for (int t = 0; t < 8; ++t) acc[t] = _mm256_fmadd_ps(qv, load8(k + (j + t) * D + c), acc[t]);
      }
      _mm256_storeu_ps(p + j, _mm256_mul_ps(sv, reduce8(acc)));
    }
  }
  for (; j < nk; ++j) p[j] = scale * dot(q, k + j * D, D);
}

// p[0..n) -> softmax(p), in place.
void softmax(float* p, int64_t n) {
  __m256 mv = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(p + j));
  float m = hmax(mv);
  for (; j < n; ++j) m = std::max(m, p[j]);
  const __m256 mb = _mm256_set1_ps(m);
  __m256 lv = _mm256_setzero_ps();
  for (j = 0; j + 8 <= n; j += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p + j), mb));
    _mm256_storeu_ps(p + j, e);
    lv = _mm256_add_ps(lv, e);
  }
  if (j < n) {
    const __m256i mask = first_lanes(n - j);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(p + j, mask), mb));
    _mm256_maskstore_ps(p + j, mask, e);
    lv = _mm256_add_ps(lv, _mm256_and_ps(e, _mm256_castsi256_ps(mask)));
  }
  const float inv = 1.f / hsum(lv);
  const __m256 iv = _mm256_set1_ps(inv);
  for (j = 0; j + 8 <= n; j += 8) _mm256_storeu_ps(p + j, _mm256_mul_ps(_mm256_loadu_ps(p + j), iv));
  for (; j < n; ++j) p[j] *= inv;
}

// o[u][c] = sum_j p[u * nk + j] v_j[c] (v_j = v + j * D) for U query heads (output rows D apart),
// columns [c0, c0 + 32).
template <int U, class T>
void weighted_v32(const float* p, int64_t nk, const T* v, int64_t c0, float* o, int64_t D) {
  __m256 acc[U][4];
  for (int u = 0; u < U; ++u)
    for (int t = 0; t < 4; ++t) acc[u][t] = _mm256_setzero_ps();
  for (int64_t j = 0; j < nk; ++j) {
    const T* vj = v + j * D + c0;
    const __m256 v0 = load8(vj), v1 = load8(vj + 8), v2 = load8(vj + 16), v3 = load8(vj + 24);
    for (int u = 0; u < U; ++u) {
      const __m256 w = _mm256_set1_ps(p[u * nk + j]);
      acc[u][0] = _mm256_fmadd_ps(w, v0, acc[u][0]);
      acc[u][1] = _mm256_fmadd_ps(w, v1, acc[u][1]);
      acc[u][2] = _mm256_fmadd_ps(w, v2, acc[u][2]);
      acc[u][3] = _mm256_fmadd_ps(w, v3, acc[u][3]);
    }
  }
  for (int u = 0; u < U; ++u)
    for (int t = 0; t < 4; ++t) _mm256_storeu_ps(o + u * D + c0 + 8 * t, acc[u][t]);
}

template <class T>
void weighted_v(const float* p, int64_t nk, int64_t group, const T* v, int64_t D, float* o) {
  int64_t c0 = 0;
  for (; c0 + 32 <= D; c0 += 32)
    for (int64_t u = 0; u < group;) {
      const int64_t U = std::min<int64_t>(3, group - u);
      if (U == 3)
        weighted_v32<3>(p + u * nk, nk, v, c0, o + u * D, D);
      else if (U == 2)
        weighted_v32<2>(p + u * nk, nk, v, c0, o + u * D, D);
      else
        weighted_v32<1>(p + u * nk, nk, v, c0, o + u * D, D);
      u += U;
    }
  if (c0 == D) return;
  for (int64_t u = 0; u < group; ++u) std::fill(o + u * D + c0, o + u * D + D, 0.f);
  for (int64_t j = 0; j < nk; ++j)
    for (int64_t u = 0; u < group; ++u) {
      const float w = p[u * nk + j];
      for (int64_t c = c0; c < D; ++c) o[u * D + c] += w * f32_of(v[j * D + c]);
    }
}

}  // namespace

void attention_cached(const RowView& q, const Tensor& kc, const Tensor& vc, const int64_t* first, int64_t n, int64_t S,
                      float scale, Tensor& out, bool allow_avx512) {
  const char* who = "attention_cached";
  check_view(q, DType::F32, who, "q");
  TITAN_CHECK(kc.defined() && (kc.dtype() == DType::F32 || kc.dtype() == DType::BF16) && kc.ndim() == 4 &&
                  vc.defined() && vc.shape() == kc.shape() && vc.dtype() == kc.dtype(),
              who, ": the cache must be two f32 or two bf16 [B, Hkv, cap, D] tensors, got ", kc.str(), " and ",
              vc.str());
  const int64_t B = kc.dim(0), Hkv = kc.dim(1), cap = kc.dim(2), D = kc.dim(3), Hq = q.h;
  TITAN_CHECK(S > 0 && q.n == B * S && q.d == D && Hq % Hkv == 0, who, ": q [", q.n, ", ", q.h, ", ", q.d,
              "] does not match the cache ", kc.str(), " with ", S, " new tokens per row");
  TITAN_CHECK(n >= S && n <= cap, who, ": ", n, " cached columns do not fit the cache ", kc.str());
  TITAN_CHECK(out.defined() && out.dtype() == DType::F32 && out.numel() == B * S * Hq * D, who, ": 'out' must be f32 [",
              B, ", ", S, ", ", Hq, ", ", D, "], got ", out.defined() ? out.str() : std::string("undefined"));
  for (int64_t b = 0; b < B; ++b)
    TITAN_CHECK(first[b] >= 0 && first[b] <= n - S, who, ": row ", b, " starts at column ", first[b],
                ", after its first new token (column ", n - S, ")");
  const int64_t group = Hq / Hkv;
  const auto qp = q.ptr<const float>();
  float* O = out.data<float>();
  // Tasks per chunk: enough for ~64K multiply-adds (q.k and p.v over up to n keys), so that a
  // short cache (early decode steps, tiny models) runs on the calling thread without opening a
  // parallel region. Each task's arithmetic is the same however the tasks are chunked.
  const int64_t task_work = std::max<int64_t>(1, 2 * n * D * group);
  const bool bf = kc.dtype() == DType::BF16;
  const bool wide = allow_avx512 && cpu_has_avx512() && detail::cached_avx512_fits(D, bf);
  auto run = [&](const auto* K, const auto* V) {
    team_parallel_for(B * Hkv * S, std::max<int64_t>(1, (int64_t(1) << 16) / task_work), [&](int64_t t0, int64_t t1) {
      thread_local std::vector<float> p;
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t b = t / (Hkv * S), g = (t / S) % Hkv, s = t % S;
        const int64_t j0 = first[b], j1 = n - S + s + 1, nk = j1 - j0;  // visible keys [j0, j1)
        p.resize(size_t(group * nk));
        const auto* krow = K + ((b * Hkv + g) * cap + j0) * D;  // the kv head's keys, one after the other
        const auto* vrow = V + ((b * Hkv + g) * cap + j0) * D;
        const int64_t h0 = (b * S + s) * Hq + g * group;  // the group's first query head
        if (wide) {  // AVX-512: heads in pairs, each pair one pass over the keys and one over the values
          for (int64_t u = 0; u < group; u += 2) {
            const int U = int(std::min<int64_t>(2, group - u));
            const float* qs[2] = {qp.vec(h0 + u), qp.vec(h0 + u + U - 1)};
            detail::cached_scores_avx512(qs, U, krow, bf, nk, D, scale, p.data() + u * nk, nk, u == 0 ? vrow : nullptr);
            for (int v = 0; v < U; ++v) softmax(p.data() + (u + v) * nk, nk);
            detail::cached_weighted_avx512(p.data() + u * nk, nk, U, vrow, bf, nk, D, O + (h0 + u) * D);
          }
          continue;
        }
        for (int64_t u = 0; u < group; ++u) {
          float* pu = p.data() + u * nk;
          scores(qp.vec(h0 + u), krow, nk, D, scale, pu, u == 0 ? vrow : nullptr);
          softmax(pu, nk);
        }
        weighted_v(p.data(), nk, group, vrow, D, O + h0 * D);
      }
    });
  };
  if (kc.dtype() == DType::BF16)
    run(kc.data<bf16>(), vc.data<bf16>());
  else
    run(kc.data<float>(), vc.data<float>());
}

}  // namespace titan
