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

void InferenceState::reserve(const std::vector<LayerKind>& kinds, int64_t kv_heads, int64_t head_dim, int64_t cols) {
  const int64_t cap = capacity();
  if (layers.size() == kinds.size() && cols <= cap) return;
  const int64_t want = std::max<int64_t>({cols, 2 * cap, 16});
  layers.resize(kinds.size());
  for (size_t l = 0; l < kinds.size(); ++l) {
    if (!has_kv(kinds[l])) continue;
    for (Tensor* t : {&layers[l].k, &layers[l].v}) {
      Tensor grown = Tensor::empty({rows, kv_heads, want, head_dim}, DType::F32);
      // Each (row, kv head) keeps its written columns at the start of its (now longer) block.
      if (t->defined() && len > 0)
        for (int64_t bg = 0; bg < rows * kv_heads; ++bg)
          std::memcpy(grown.data<float>() + bg * want * head_dim, t->data<float>() + bg * cap * head_dim,
                      size_t(len * head_dim) * sizeof(float));
      *t = grown;
    }
  }
}

void InferenceState::append_kv(size_t layer, const float* k, int64_t k_stride, const float* v, int64_t v_stride,
                               int64_t S) {
  LayerState& st = layers.at(layer);
  const int64_t Hkv = st.k.dim(1), cap = st.k.dim(2), D = st.k.dim(3);
  TITAN_ASSERT(len + S <= cap, "append_kv: ", len, " + ", S, " columns exceed the capacity ", cap);
  float* kc = st.k.data<float>();
  float* vc = st.v.data<float>();
  for (int64_t b = 0; b < rows; ++b)
    for (int64_t g = 0; g < Hkv; ++g) {
      const int64_t dst = ((b * Hkv + g) * cap + len) * D;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t src = (b * S + s);
        std::memcpy(kc + dst + s * D, k + src * k_stride + g * D, size_t(D) * sizeof(float));
        std::memcpy(vc + dst + s * D, v + src * v_stride + g * D, size_t(D) * sizeof(float));
      }
    }
}

}  // namespace titan
