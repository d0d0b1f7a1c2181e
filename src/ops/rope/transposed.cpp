// RoPE, transposed-layout variant ("transposed"; "fused", its first name, still selects it; it
// fuses nothing): works head by head in its own layout [B, H, S, D] (the model keeps [B, S, H, D]
// rows, possibly strided): each (b, h) panel [S, D] is transposed in, rotated, transposed out.
// The rotation is gather-free: for position s the cos/sin cache rows s are read contiguously, and rotate_half is
// the pair of half-rows (x1 = x[:D/2], x2 = x[D/2:]) used directly, with no index tensors:
//   y1 = x1 * cos[s, :D/2] - x2 * sin[s, :D/2],   y2 = x2 * cos[s, D/2:] + x1 * sin[s, D/2:]
// The cache is the state kept for backward (passed again to backward; no gradient reaches it):
//   dx1 = dy1 * cos[:D/2] + dy2 * sin[:D/2],      dx2 = dy2 * cos[D/2:] - dy1 * sin[D/2:]
//
// Bit-exactness with the reference: every output element is computed with the same operations in
// the same order as reference.cpp: two products of f32 values in double (exact: 24 x 24 bits fit in
// 53), one double add or subtract, one rounding to f32. So forward and backward agree bit for bit
// with the reference (checked by `titan verify kernels` and tests/unit/ops/test_rope_transposed.cpp and the kernel case table).
#include <vector>

#include "core/threading.h"
#include "ops/op_checks.h"
#include "ops/rope/checks.h"
#include "ops/rope/rope.h"

namespace titan {
namespace {

// Rotates one contiguous panel p [S, D] in place (cache rows from the panel's first position).
void rotate_panel(float* p, int64_t S, int64_t D, const float* cp, const float* sp, bool forward) {
  const int64_t half = D / 2;
  for (int64_t s = 0; s < S; ++s) {
    float* r = p + s * D;
    const float* c = cp + s * D;   // cache row s, contiguous
    const float* sn = sp + s * D;
    if (forward) {
      for (int64_t j = 0; j < half; ++j) {
        const double x1 = r[j], x2 = r[j + half];
        r[j] = float(x1 * c[j] - x2 * sn[j]);
        r[j + half] = float(x2 * c[j + half] + x1 * sn[j + half]);
      }
    } else {
      for (int64_t j = 0; j < half; ++j) {
        const double x1 = r[j], x2 = r[j + half];
        r[j] = float(x1 * c[j] + x2 * sn[j]);
        r[j + half] = float(x2 * c[j + half] - x1 * sn[j + half]);
      }
    }
  }
}

void apply(const RowView& x, int64_t seq, int64_t start, const RopeCache& cache, bool forward, const char* name) {
  const auto [B, S, H, D] = rope_detail::check(x, seq, start, cache, name);
  const auto xs = x.ptr<float>();  // [B * S rows, H, D]
  const float* cp = cache.cos.data<float>() + start * D;
  const float* sp = cache.sin.data<float>() + start * D;
  // One task per (b, h) panel; panels are disjoint, so the result is thread-count independent.
  parallel_for(B * H, 1, [&](int64_t p0, int64_t p1) {
    std::vector<float> panel(size_t(S * D));  // [S, D] of head h in batch b
    for (int64_t bh = p0; bh < p1; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      for (int64_t s = 0; s < S; ++s) {  // transpose in: [S, H, D] -> [S, D] of head h
        const float* src = xs.row(b * S + s) + h * D;
        for (int64_t j = 0; j < D; ++j) panel[size_t(s * D + j)] = src[j];
      }
      rotate_panel(panel.data(), S, D, cp, sp, forward);
      for (int64_t s = 0; s < S; ++s) {  // transpose out
        float* dst = xs.row(b * S + s) + h * D;
        for (int64_t j = 0; j < D; ++j) dst[j] = panel[size_t(s * D + j)];
      }
    }
  });
}

void forward(const ExecContext& ctx, const RowView& x, int64_t seq, int64_t start, const RopeCache& cache) {
  opcheck::host_context(ctx, "rope.transposed");
  apply(x, seq, start, cache, true, "x");
}
void backward(const ExecContext& ctx, const RowView& dy, int64_t seq, int64_t start, const RopeCache& cache) {
  opcheck::host_context(ctx, "rope.transposed");
  apply(dy, seq, start, cache, false, "dy");
}

const RopeKernel kTransposed{"transposed", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(RopeKernel, "transposed", DeviceType::CPU, kTransposed);
TITAN_REGISTER_KERNEL_ALIAS(RopeKernel, "fused", "transposed");  // the name job files used first
}  // namespace titan
