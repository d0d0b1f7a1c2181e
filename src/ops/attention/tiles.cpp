// Portable tile primitives (plain C++ the compiler vectorizes for the baseline ISA) and the run-time
// choice between them and the AVX-512 ones.
#include "ops/attention/tiles.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/cpu_features.h"

namespace titan::attention {
namespace {

// Four rows of C at a time over a column chunk of up to kTile, so each B row load feeds 4 rows.
void gemm_portable(int64_t M, int64_t N, int64_t K, const float* a, int64_t a_rs, int64_t a_ks, const float* b,
                   int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  constexpr int R = 4;
  for (int64_t n0 = 0; n0 < N; n0 += kTile) {
    const int64_t nw = std::min<int64_t>(kTile, N - n0);
    for (int64_t m0 = 0; m0 < M; m0 += R) {
      const int64_t rows = std::min<int64_t>(R, M - m0);
      float acc[R][kTile];
      for (int64_t r = 0; r < R; ++r)
        for (int64_t n = 0; n < nw; ++n) acc[r][n] = (accumulate && r < rows) ? c[(m0 + r) * ldc + n0 + n] : 0.f;
      for (int64_t k = 0; k < K; ++k) {
        const float* bk = b + k * ldb + n0;
        for (int64_t r = 0; r < rows; ++r) {
          const float ar = a[(m0 + r) * a_rs + k * a_ks];
          for (int64_t n = 0; n < nw; ++n) acc[r][n] += ar * bk[n];
        }
      }
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t n = 0; n < nw; ++n) c[(m0 + r) * ldc + n0 + n] = acc[r][n];
    }
  }
}

void softmax_step_portable(float* st, int kn, bool diagonal, float* m, float* l, float* alpha) {
  float mx[kTile];
  for (int i = 0; i < kTile; ++i) mx[i] = m[i];
  for (int j = 0; j < kn; ++j) {
    float* row = st + j * kTile;
    if (diagonal)
      for (int i = 0; i < j && i < kTile; ++i) row[i] = -INFINITY;
    for (int i = 0; i < kTile; ++i) mx[i] = std::max(mx[i], row[i]);
  }
  float sum[kTile] = {};
  for (int j = 0; j < kn; ++j) {
    float* row = st + j * kTile;
    for (int i = 0; i < kTile; ++i) sum[i] += (row[i] = std::exp(row[i] - mx[i]));
  }
  for (int i = 0; i < kTile; ++i) {
    alpha[i] = std::exp(m[i] - mx[i]);  // m = -inf on the first block: alpha = 0
    l[i] = alpha[i] * l[i] + sum[i];
    m[i] = mx[i];
  }
}

void backward_step_portable(float* st, float* dpt, int kn, bool diagonal, const float* lse, const float* dsum,
                            float scale) {
  for (int j = 0; j < kn; ++j) {
    float* p = st + j * kTile;
    float* ds = dpt + j * kTile;
    for (int i = 0; i < kTile; ++i) {
      const bool masked = diagonal && i < j;  // masked entries may hold stale values: never read them
      p[i] = masked ? 0.f : std::exp(p[i] - lse[i]);
      ds[i] = masked ? 0.f : scale * p[i] * (ds[i] - dsum[i]);
    }
  }
}

std::atomic<bool> g_prefer_portable{false};

}  // namespace

const TileOps& tile_ops_portable() {
  static const TileOps ops{"portable", gemm_portable, softmax_step_portable, backward_step_portable};
  return ops;
}

const TileOps& tile_ops() {
  if (cpu_has_avx512() && !g_prefer_portable.load(std::memory_order_relaxed)) return tile_ops_avx512();
  return tile_ops_portable();
}

void prefer_portable_tiles(bool on) { g_prefer_portable.store(on, std::memory_order_relaxed); }

}  // namespace titan::attention
