#include "model/inference_state.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace titan {

namespace {
bool has_kv(const LayerKind& k) { return k.mixer == MixerKind::Attention || k.mixer == MixerKind::GatedAttention; }
}  // namespace

int64_t InferenceState::capacity() const {
  for (const LayerState& s : layers)
    if (s.k.defined()) return s.k.dim(2);
  return 0;
}

void InferenceState::reserve(const std::vector<LayerKind>& kinds, int64_t kv_heads, int64_t head_dim, int64_t cols,
                             DType dtype) {
  TITAN_ASSERT(dtype == DType::F32 || dtype == DType::BF16, "KV cache: f32 or bf16, not ", dtype_name(dtype));
  const int64_t cap = capacity();
  bool same_type = true;  // an empty cache of another dtype is made anew below
  for (const LayerState& s : layers) {
    if (!s.k.defined() || s.k.dtype() == dtype) continue;
    TITAN_ASSERT(len == 0, "KV cache: ", dtype_name(s.k.dtype()), " columns written, ", dtype_name(dtype), " asked");
    same_type = false;
  }
  if (layers.size() == kinds.size() && cols <= cap && same_type) return;
  const int64_t want = std::max<int64_t>({cols, 2 * cap, 16});
  const size_t col_bytes = size_t(head_dim) * dtype_size(dtype);
  layers.resize(kinds.size());
  for (size_t l = 0; l < kinds.size(); ++l) {
    if (!has_kv(kinds[l])) continue;
    for (Tensor* t : {&layers[l].k, &layers[l].v}) {
      Tensor grown = Tensor::empty({rows, kv_heads, want, head_dim}, dtype);
      // Each (row, kv head) keeps its written columns at the start of its (now longer) block.
      if (t->defined() && len > 0)
        for (int64_t bg = 0; bg < rows * kv_heads; ++bg)
          std::memcpy(static_cast<char*>(grown.raw()) + size_t(bg * want) * col_bytes,
                      static_cast<const char*>(t->raw()) + size_t(bg * cap) * col_bytes, size_t(len) * col_bytes);
      *t = grown;
    }
  }
}

void InferenceState::append_kv(size_t layer, const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                               int64_t S) {
  LayerState& st = layers.at(layer);
  const int64_t Hkv = st.k.dim(1), cap = st.k.dim(2), D = st.k.dim(3);
  TITAN_ASSERT(len + S <= cap, "append_kv: ", len, " + ", S, " columns exceed the capacity ", cap);
  const DType dt = st.k.dtype();
  const size_t es = dtype_size(dt);
  char* kc = static_cast<char*>(st.k.raw());
  char* vc = static_cast<char*>(st.v.raw());
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t g = 0; g < Hkv; ++g) {
      const int64_t dst = ((b * Hkv + g) * cap + len) * D;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t src = (b * S + s);
        convert_floats(k + src * k_stride + g * D, DType::F32, kc + size_t(dst + s * D) * es, dt, size_t(D));
        convert_floats(v + src * v_stride + g * D, DType::F32, vc + size_t(dst + s * D) * es, dt, size_t(D));
      }
    }
}

}  // namespace titan
