// Rotary position embedding as HF Qwen3 (half-split rotate_half):
//   inv_freq[i] = 1 / theta^(2i/D) (computed in f32 as HF), freqs[p, i] = p * inv_freq[i]
//   cos/sin cache [P, D] f32 with the D/2 frequencies repeated twice: cos[p, j] = cos(freqs[p, j mod D/2])
//   y = x * cos + rotate_half(x) * sin,  rotate_half(x) = cat(-x[D/2:], x[:D/2])
// Applied in place on x: [B, S, H, D] for positions 0..S-1. Backward is the transposed rotation:
//   dx = dy * cos + rotate_half^T(dy * sin),  rotate_half^T(u) = cat(u[D/2:], -u[:D/2])
// No gradient flows to the cache.
#pragma once
#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct RopeCache {
  Tensor cos, sin;  // [max_pos, head_dim] f32
  int64_t max_pos() const { return cos.dim(0); }
  int64_t head_dim() const { return cos.dim(1); }
};
RopeCache make_rope_cache(double theta, int64_t head_dim, int64_t max_pos);

struct RopeKernel {
  static constexpr const char* op_name = "rope";
  const char* variant;
  void (*forward)(Tensor& x, const RopeCache& cache);   // in place
  void (*backward)(Tensor& dy, const RopeCache& cache); // in place: dy -> dx
};

}  // namespace titan
