#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace titan {

void KvCache::reserve(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t cols) {
  const int64_t cap = capacity();
  if (int64_t(k.size()) == layers && cols <= cap) return;
  const int64_t want = std::max<int64_t>({cols, 2 * cap, 16});
  const int64_t row = kv_heads * head_dim;  // floats per column
  k.resize(size_t(layers)), v.resize(size_t(layers));
  for (size_t l = 0; l < size_t(layers); ++l)
    for (Tensor* t : {&k[l], &v[l]}) {
      Tensor grown = Tensor::empty({rows, want, kv_heads, head_dim}, DType::F32);
      if (t->defined() && len > 0)
        for (int64_t b = 0; b < rows; ++b)
          std::memcpy(grown.data<float>() + b * want * row, t->data<float>() + b * cap * row,
                      size_t(len * row) * sizeof(float));
      *t = grown;
    }
}

}  // namespace titan
