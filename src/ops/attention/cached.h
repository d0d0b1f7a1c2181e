// Attention of new query tokens over a KV cache (generation): the step after a prefill appends S
// columns (S = 1 when decoding) to each row of a left-padded batch, whose keys and values sit in a
// cache [B, Hkv, cap, D] f32 (columns 0..n-1 written; one kv head's keys are contiguous). Query s
// (0 <= s < S) of row b is column n - S + s and sees the keys [first[b], n - S + s] (causal, and
// the row's left padding masked out), with HF eager semantics (f32 scores, softmax over the
// visible keys, GQA head h -> kv head h / (Hq / Hkv)):
//   out[b, s, h] = sum_j softmax_j(scale * q.k_j) v_j
// Exactly what the causal attention op (attention.h) gives the same row without its padding, up
// to summation order. There is no backward (inference only).
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/row_view.h"

namespace titan {

// q: [B * S, Hq, D] f32 view (token rows b * S + s); kc, vc: [B, Hkv, cap, D] f32 contiguous;
// first: B entries, first[b] < n - S + 1; out: [B, S, Hq, D] f32 contiguous (overwritten).
// allow_avx512 = false keeps the AVX2 passes on an AVX-512 CPU (tests).
void attention_cached(const RowView& q, const Tensor& kc, const Tensor& vc, const int64_t* first, int64_t n, int64_t S,
                      float scale, Tensor& out, bool allow_avx512 = true);

}  // namespace titan
