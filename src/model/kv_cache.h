// The keys and values a generating model keeps per decoder layer, so each step computes only its
// new columns (DecoderModel::forward_cached). Rows are those of a left-padded batch
// (infer/batch.h): row b's first[b] leading columns are padding, masked out of every attention,
// and its real tokens sit at positions column - first[b]. Keys are stored after the q/k norm and
// RoPE, as attention reads them.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace titan {

struct KvCache {
  int64_t rows = 0;
  int64_t len = 0;             // columns written (the same for every row)
  std::vector<int64_t> first;  // [rows] first real column of each row
  std::vector<Tensor> k, v;    // per layer [rows, capacity, kv_heads, head_dim] f32

  // An empty cache for `first.size()` rows (layers get memory on first use).
  void reset(std::vector<int64_t> first_real_column) {
    first = std::move(first_real_column);
    rows = int64_t(first.size());
    len = 0;
    k.clear();
    v.clear();
  }
  int64_t capacity() const { return k.empty() || !k[0].defined() ? 0 : k[0].dim(1); }
  // Makes room for `cols` columns in every layer (keeping the written ones): capacity grows by
  // doubling, so appending one column at a time copies O(total) in all.
  void reserve(int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t cols);
};

}  // namespace titan
