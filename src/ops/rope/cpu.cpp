// RoPE, cpu variant: in place over the [B * S, H, D] row view, one (b, s) row of H heads per step so that the
// position's cos/sin row is loaded once for all heads; f32 arithmetic as HF's
// x * cos + rotate_half(x) * sin. Elementwise, so independent of the thread count.
#include "core/threading.h"
#include "ops/op_checks.h"
#include "ops/rope/checks.h"
#include "ops/rope/rope.h"

namespace titan {
namespace {

// sign = +1: y1 = x1 c - x2 s, y2 = x2 c + x1 s; sign = -1: the transposed rotation.
template <int kSign>
void rotate(const RowView& x, int64_t seq, int64_t start, const RopeCache& cache, const char* name) {
  const auto [B, S, H, D] = rope_detail::check(x, seq, start, cache, name);
  const int64_t half = D / 2;
  const float* cp = cache.cos.data<float>();  // [P, D]
  const float* sp = cache.sin.data<float>();  // [P, D]
  const auto xs = x.ptr<float>();             // [B * S rows, H, D]
  const int64_t grain = H * D >= 8192 ? 1 : 8192 / (H * D);
  parallel_for(B * S, grain, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t pos = start + row % S;
      const float* __restrict c1 = cp + pos * D;
      const float* __restrict c2 = c1 + half;
      const float* __restrict s1 = sp + pos * D;
      const float* __restrict s2 = s1 + half;
      for (int64_t h = 0; h < H; ++h) {
        float* __restrict a = xs.row(row) + h * D;  // first half
        float* __restrict b = a + half;             // second half
        for (int64_t j = 0; j < half; ++j) {
          const float x1 = a[j], x2 = b[j];
          if constexpr (kSign > 0) {
            a[j] = x1 * c1[j] - x2 * s1[j];
            b[j] = x2 * c2[j] + x1 * s2[j];
          } else {
            a[j] = x1 * c1[j] + x2 * s1[j];
            b[j] = x2 * c2[j] - x1 * s2[j];
          }
        }
      }
    }
  });
}

void forward(const ExecContext& ctx, const RowView& x, int64_t seq, int64_t start, const RopeCache& cache) {
  opcheck::host_context(ctx, "rope.cpu");
  rotate<1>(x, seq, start, cache, "x");
}
void backward(const ExecContext& ctx, const RowView& dy, int64_t seq, int64_t start, const RopeCache& cache) {
  opcheck::host_context(ctx, "rope.cpu");
  rotate<-1>(dy, seq, start, cache, "dy");
}

const RopeKernel kCpu{"cpu", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(RopeKernel, "cpu", DeviceType::CPU, kCpu);
}  // namespace titan
