// Rotary position embedding as HF Qwen3 (half-split rotate_half):
//   inv_freq[i] = 1 / theta^(2i/D) (computed in f32 as HF), freqs[p, i] = p * inv_freq[i]
//   cos/sin cache [P, D] f32 with the D/2 frequencies repeated twice: cos[p, j] = cos(freqs[p, j mod D/2])
//   y = x * cos + rotate_half(x) * sin,  rotate_half(x) = cat(-x[D/2:], x[:D/2])
// Applied in place on x: [B, S, H, D] for positions 0..S-1. Backward is the transposed rotation:
//   dx = dy * cos + rotate_half^T(dy * sin),  rotate_half^T(u) = cat(u[D/2:], -u[:D/2])
// No gradient flows to the cache.
//
// The kernels take x as a row view (ops/row_view.h) of B * S token rows of H heads, rows possibly
// strided (the q or k heads inside the fused qkv gradient, rotated back in place there): row r is
// token s = r mod S of its sequence, at position start + s (start > 0: tokens appended after a
// cached prefix).
#pragma once
#include "core/tensor.h"
#include "ops/registry.h"
#include "ops/row_view.h"

namespace titan {

struct RopeCache {
  Tensor cos, sin;  // [max_pos, head_dim] f32
  int64_t max_pos() const { return cos.dim(0); }
  int64_t head_dim() const { return cos.dim(1); }
};
// Llama 3's frequency scaling of inv_freq (HF _compute_llama3_parameters), off when factor == 0.
struct RopeLlama3 {
  double factor = 0, low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_max_position_embeddings = 8192;
};
RopeCache make_rope_cache(double theta, int64_t head_dim, int64_t max_pos, const RopeLlama3& scaling = {});

struct RopeKernel {
  static constexpr const char* op_name = "rope";
  const char* variant;
  void (*forward_rows)(const ExecContext& ctx, const RowView& x, int64_t seq, int64_t start,
                       const RopeCache& cache);  // in place
  void (*backward_rows)(const ExecContext& ctx, const RowView& dy, int64_t seq, int64_t start,
                        const RopeCache& cache);  // dy -> dx

  // Contiguous x [B, S, H, D], positions 0..S-1.
  void forward(const ExecContext& ctx, Tensor& x, const RopeCache& cache) const {
    forward_rows(ctx, rows(x), x.dim(1), 0, cache);
  }
  void backward(const ExecContext& ctx, Tensor& dy, const RopeCache& cache) const {
    backward_rows(ctx, rows(dy), dy.dim(1), 0, cache);
  }

 private:
  static RowView rows(const Tensor& x) {
    TITAN_CHECK(x.defined() && x.ndim() == 4 && x.dim(2) > 0 && x.dim(3) > 0, "rope: x must be [B, S, H, D], got ",
                x.defined() ? x.str() : std::string("undefined"));
    return RowView::of(x, x.dim(2), x.dim(3));
  }
};

}  // namespace titan
