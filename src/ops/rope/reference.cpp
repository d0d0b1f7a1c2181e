// RoPE, reference variant, in double with the f32 cache, half-split as HF's rotate_half:
//   forward:  y1 = x1 cos - x2 sin,  y2 = x2 cos + x1 sin     (x1 = x[:D/2], x2 = x[D/2:])
//   backward: dx1 = dy1 cos + dy2 sin, dx2 = dy2 cos - dy1 sin (the transposed rotation)
// with cos/sin taken at column j for the first half and j + D/2 for the second, as the cache stores them.
#include "ops/op_checks.h"
#include "ops/rope/checks.h"
#include "ops/rope/rope.h"

namespace titan {
namespace {

// sign = +1 rotates forward, -1 applies the transpose (the rotation by the negated angle).
void rotate(const RowView& x, int64_t seq, int64_t start, const RopeCache& cache, double sign, const char* name) {
  const auto [B, S, H, D] = rope_detail::check(x, seq, start, cache, name);
  const int64_t half = D / 2;
  const float* cp = cache.cos.data<float>();  // [P, D]
  const float* sp = cache.sin.data<float>();  // [P, D]
  const auto xs = x.ptr<float>();             // [B * S rows, H, D]
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h) {
        float* r = xs.row(b * S + s) + h * D;
        const float* c = cp + (start + s) * D;
        const float* sn = sp + (start + s) * D;
        for (int64_t j = 0; j < half; ++j) {
          const double x1 = r[j], x2 = r[j + half];
          r[j] = float(x1 * c[j] - sign * x2 * sn[j]);
          r[j + half] = float(x2 * c[j + half] + sign * x1 * sn[j + half]);
        }
      }
}

void forward(const ExecContext& ctx, const RowView& x, int64_t seq, int64_t start, const RopeCache& cache) {
  opcheck::host_context(ctx, "rope.reference");
  rotate(x, seq, start, cache, 1.0, "x");
}
void backward(const ExecContext& ctx, const RowView& dy, int64_t seq, int64_t start, const RopeCache& cache) {
  opcheck::host_context(ctx, "rope.reference");
  rotate(dy, seq, start, cache, -1.0, "dy");
}

const RopeKernel kReference{"reference", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(RopeKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
