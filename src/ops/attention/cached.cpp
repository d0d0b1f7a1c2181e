// attention_cached (cached.h): one task per (row, kv head, query); the kv head's group of query
// heads is done together so each cached key and value row is read once per query token. Scores
// for the visible keys go to a per-thread buffer, then one softmax and one weighted sum of V rows
// (two passes over the keys; the cache of one row and head is small next to the weights a decode
// step reads).
#include "ops/attention/cached.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/team.h"

namespace titan {
namespace {

inline float dot(const float* __restrict a, const float* __restrict b, int64_t n) {
  float part[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int u = 0; u < 8; ++u) part[u] += a[i + u] * b[i + u];
  for (; i < n; ++i) part[0] += a[i] * b[i];
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

}  // namespace

void attention_cached(const RowView& q, const Tensor& kc, const Tensor& vc, const int64_t* first, int64_t n,
                      int64_t S, float scale, Tensor& out) {
  const char* who = "attention_cached";
  check_view(q, DType::F32, who, "q");
  TITAN_CHECK(kc.defined() && kc.dtype() == DType::F32 && kc.ndim() == 4 && vc.defined() && vc.shape() == kc.shape() &&
                  vc.dtype() == DType::F32,
              who, ": the cache must be two f32 [B, cap, Hkv, D] tensors, got ", kc.str(), " and ", vc.str());
  const int64_t B = kc.dim(0), cap = kc.dim(1), Hkv = kc.dim(2), D = kc.dim(3), Hq = q.h;
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
  const float* K = kc.data<float>();
  const float* V = vc.data<float>();
  float* O = out.data<float>();
  // Tasks per chunk: enough for ~64K multiply-adds (q.k and p.v over up to n keys), so that a
  // short cache (early decode steps, tiny models) runs on the calling thread without opening a
  // parallel region. Each task's arithmetic is the same however the tasks are chunked.
  const int64_t task_work = std::max<int64_t>(1, 2 * n * D * group);
  team_parallel_for(B * Hkv * S, std::max<int64_t>(1, (int64_t(1) << 16) / task_work), [&](int64_t t0, int64_t t1) {
    thread_local std::vector<float> p;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / (Hkv * S), g = (t / S) % Hkv, s = t % S;
      const int64_t j0 = first[b], j1 = n - S + s + 1, nk = j1 - j0;  // visible keys [j0, j1)
      p.resize(size_t(group * nk));
      const float* krow = K + ((b * cap + j0) * Hkv + g) * D;
      const float* vrow = V + ((b * cap + j0) * Hkv + g) * D;
      const int64_t kstride = Hkv * D;
      for (int64_t j = 0; j < nk; ++j)
        for (int64_t u = 0; u < group; ++u)
          p[size_t(u * nk + j)] = scale * dot(qp.vec((b * S + s) * Hq + g * group + u), krow + j * kstride, D);
      for (int64_t u = 0; u < group; ++u) {
        float* pu = p.data() + u * nk;
        const float m = *std::max_element(pu, pu + nk);
        float l = 0;
        for (int64_t j = 0; j < nk; ++j) l += (pu[j] = std::exp(pu[j] - m));
        const float inv = 1.f / l;
        for (int64_t j = 0; j < nk; ++j) pu[j] *= inv;
      }
      float* orow = O + ((b * S + s) * Hq + g * group) * D;
      std::fill_n(orow, group * D, 0.f);
      for (int64_t j = 0; j < nk; ++j) {
        const float* vj = vrow + j * kstride;
        for (int64_t u = 0; u < group; ++u) {
          const float w = p[size_t(u * nk + j)];
          float* o = orow + u * D;
          for (int64_t c = 0; c < D; ++c) o[c] += w * vj[c];
        }
      }
    }
  });
}

}  // namespace titan
