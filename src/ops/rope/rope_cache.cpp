// The cos/sin cache, computed exactly as HF Qwen3RotaryEmbedding does it, in f32 arithmetic:
//   inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=int64).float() / D))   (f32 pow, f32 divide)
//   freqs = positions.float() @ inv_freq  (a K=1 product: one f32 multiply)
//   emb = cat(freqs, freqs); cos = emb.cos(); sin = emb.sin()   (f32)
// base is a Python float that torch hands to the f32 pow as a float, so theta is rounded to f32 first.
// torch's f32 pow, cos and sin are within an ulp of the correctly rounded results; here they are
// evaluated in double and rounded once to f32 (correctly rounded but for astronomically rare ties),
// which reproduces HF's inv_freq bit for bit in all but one of the 128 values of the fixture
// (tests/fixtures/ops/rope_hf.json), where glibc's powf differs in 14 of them.
#include <cmath>

#include "ops/rope/rope.h"

namespace titan {
namespace {

// HF's _compute_llama3_parameters on one f32 inv_freq, in f32 as torch evaluates it (a Python
// scalar meets an f32 tensor as an f32; `scalar / t` is t.reciprocal() * scalar):
//   wavelen = 2 pi / inv_freq
//   wavelen > old / low:   inv_freq / factor
//   wavelen < old / high:  inv_freq
//   else:                  (1 - s) * inv_freq / factor + s * inv_freq,  s = (old / wavelen - low) / (high - low)
float llama3_inv_freq(float inv_freq, const RopeLlama3& r) {
  const float factor = float(r.factor), low = float(r.low_freq_factor);
  const double old_len = double(r.original_max_position_embeddings);
  const float low_wavelen = float(old_len / r.low_freq_factor), high_wavelen = float(old_len / r.high_freq_factor);
  const float wavelen = (1.0f / inv_freq) * float(2 * M_PI);
  if (wavelen > low_wavelen) return inv_freq / factor;
  if (wavelen < high_wavelen) return inv_freq;
  const float smooth = ((1.0f / wavelen) * float(old_len) - low) / float(r.high_freq_factor - r.low_freq_factor);
  return (1.0f - smooth) * inv_freq / factor + smooth * inv_freq;
}

}  // namespace

RopeCache make_rope_cache(double theta, int64_t head_dim, int64_t max_pos, const RopeLlama3& scaling) {
  TITAN_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be a positive even number, got ", head_dim);
  TITAN_CHECK(max_pos > 0, "rope: max_pos must be positive, got ", max_pos);
  TITAN_CHECK(theta > 1.0 && std::isfinite(theta), "rope: rope_theta must be a finite number > 1, got ", theta);
  TITAN_CHECK(max_pos <= (int64_t(1) << 24), "rope: max_pos ", max_pos, " exceeds the exactly representable f32 positions");
  const int64_t half = head_dim / 2;
  const float base = float(theta);
  RopeCache c;
  c.cos = Tensor::empty({max_pos, head_dim}, DType::F32);
  c.sin = Tensor::empty({max_pos, head_dim}, DType::F32);
  float* cp = c.cos.data<float>();  // [P, D]
  float* sp = c.sin.data<float>();  // [P, D]
  for (int64_t i = 0; i < half; ++i) {
    const float expo = float(2 * i) / float(head_dim);
    float inv_freq = 1.0f / float(std::pow(double(base), double(expo)));
    if (scaling.factor > 0) inv_freq = llama3_inv_freq(inv_freq, scaling);
    for (int64_t p = 0; p < max_pos; ++p) {
      const float f = float(p) * inv_freq;
      const float cv = float(std::cos(double(f))), sv = float(std::sin(double(f)));
      cp[p * head_dim + i] = cp[p * head_dim + i + half] = cv;
      sp[p * head_dim + i] = sp[p * head_dim + i + half] = sv;
    }
  }
  return c;
}

}  // namespace titan
