#include "model/inference_state.h"

#include <algorithm>
#include <cstring>

namespace titan {

namespace {
bool has_kv(const LayerKind& k) { return k.mixer == MixerKind::Attention || k.mixer == MixerKind::GatedAttention; }
}  // namespace

int64_t InferenceState::capacity() const {
  for (const LayerState& s : layers)
    if (s.k.defined()) return s.k.dim(1);
  return 0;
}

void InferenceState::reserve(const std::vector<LayerKind>& kinds, int64_t kv_heads, int64_t head_dim, int64_t cols) {
  const int64_t cap = capacity();
  if (layers.size() == kinds.size() && cols <= cap) return;
  const int64_t want = std::max<int64_t>({cols, 2 * cap, 16});
  const int64_t row = kv_heads * head_dim;  // floats per column
  layers.resize(kinds.size());
  for (size_t l = 0; l < kinds.size(); ++l) {
    if (!has_kv(kinds[l])) continue;
    for (Tensor* t : {&layers[l].k, &layers[l].v}) {
      Tensor grown = Tensor::empty({rows, want, kv_heads, head_dim}, DType::F32);
      if (t->defined() && len > 0)
        for (int64_t b = 0; b < rows; ++b)
          std::memcpy(grown.data<float>() + b * want * row, t->data<float>() + b * cap * row,
                      size_t(len * row) * sizeof(float));
      *t = grown;
    }
  }
}

}  // namespace titan
