// rope_partial on the CPU (partial.h).
#include "ops/rope/partial.h"

#include "core/threading.h"
#include "ops/op_checks.h"

namespace titan {

void rope_partial(const ExecContext& ctx, const RowView& x, int64_t rd, const RopeCache& cache, const int64_t* pos,
                  bool backward) {
  opcheck::host_context(ctx, "rope_partial");
  check_view(x, DType::F32, "rope_partial", "x");
  TITAN_CHECK(rd > 0 && rd % 2 == 0 && rd <= x.d && cache.head_dim() == rd, "rope_partial: rotary dim ", rd,
              " must be even, at most the head dim ", x.d, " and the cache's ", cache.head_dim());
  const int64_t half = rd / 2, P = cache.max_pos();
  for (int64_t r = 0; r < x.n; ++r)
    TITAN_CHECK(pos[r] < P, "rope_partial: position ", pos[r], " of row ", r, " is past the cache's ", P);
  const float* cp = cache.cos.data<float>();
  const float* sp = cache.sin.data<float>();
  const auto xs = x.ptr<float>();
  const float sign = backward ? -1.0f : 1.0f;
  parallel_for(x.n, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t p = pos[row];
      if (p < 0) continue;
      const float* c = cp + p * rd;
      const float* s = sp + p * rd;
      for (int64_t h = 0; h < x.h; ++h) {
        float* a = xs.row(row) + h * x.d;
        float* b = a + half;
        for (int64_t j = 0; j < half; ++j) {
          const float x1 = a[j], x2 = b[j], sj = sign * s[j];
          a[j] = x1 * c[j] - x2 * sj;
          b[j] = x2 * c[j + half] + x1 * s[j + half] * sign;
        }
      }
    }
  });
}

}  // namespace titan
