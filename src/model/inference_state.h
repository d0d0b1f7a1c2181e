// What a generating model keeps per decoder layer between calls, so each step computes only its
// new columns (DecoderModel::forward_cached): one slot per layer, whose contents depend on the
// layer's mixer kind (model/layer_kind.h) — the keys and values of an attention layer (growing
// with the context), or the fixed-size convolution window and recurrent state of a linear-attention
// layer. Rows are those of a left-padded batch (infer/batch.h): row b's first[b] leading columns
// are padding, masked out of every attention, and its real tokens sit at positions column -
// first[b]. Keys are stored after the q/k norm and RoPE, as attention reads them.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/layer_kind.h"

namespace titan {

struct LayerState {
  // Attention kinds: [rows, kv_heads, capacity, head_dim] f32, or bf16 when the model computes in
  // bf16 (reserve's dtype; undefined until reserved): each kv
  // head's keys (values) of one row are contiguous, so attention_cached scans them as one stream
  // (in [rows, capacity, kv_heads, head_dim] consecutive keys of a head were kv_heads * head_dim
  // floats apart: 4 KiB on Qwen3-0.6B, one page per key, which the prefetchers do not follow).
  Tensor k, v;
  // Linear-attention kinds: the last kernel-1 inputs of the causal convolution and the recurrent
  // state, of a size fixed by the layer (made by the layer on its first call).
  Tensor conv, recurrent;
};

struct InferenceState {
  int64_t rows = 0;
  int64_t len = 0;             // columns written (the same for every row)
  std::vector<int64_t> first;  // [rows] first real column of each row
  std::vector<LayerState> layers;

  // An empty state for `first.size()` rows (layers get memory on first use).
  void reset(std::vector<int64_t> first_real_column) {
    first = std::move(first_real_column);
    rows = int64_t(first.size());
    len = 0;
    layers.clear();
  }
  // Columns the attention layers can hold without growing (0 before the first reserve).
  int64_t capacity() const;
  // Makes room for `cols` columns in every attention layer of `kinds` (keeping the written ones):
  // capacity grows by doubling, so appending one column at a time copies O(total) in all. Other
  // kinds' slots are left to their layer. `dtype` (f32 or bf16) is the keys' and values' type; it
  // cannot change while columns are written.
  void reserve(const std::vector<LayerKind>& kinds, int64_t kv_heads, int64_t head_dim, int64_t cols,
               DType dtype = DType::F32);
  // Writes S new columns of every row to layer `layer`'s cache at columns [len, len + S) (room
  // reserved): token row b * S + s of `k` / `v` holds its kv_heads * head_dim floats, head by
  // head, at k + (b * S + s) * k_stride (v likewise); a bf16 cache gets them rounded to nearest
  // even. `len` is not advanced.
  void append_kv(size_t layer, const float* k, int64_t k_stride, const float* v, int64_t v_stride, int64_t S);
};

}  // namespace titan
