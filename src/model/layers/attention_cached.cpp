// The attention block's middle with a KV cache (DecoderModel::attend_cached, called by
// layer_forward during generation): q and k arrive normed ([B, S, heads, D]) for the S new
// columns of each row of a left-padded batch (model/inference_state.h).
//   - RoPE: row b's real columns are at positions column - first[b]; its padding columns are left
//     unrotated (they are never attended to, and their own outputs are never read).
//   - The new keys (after RoPE) and values (read in place from the fused qkv) are written to the
//     cache columns [len, len + S).
//   - Prefill (len == 0): each row's real columns are exactly a causal sequence of their own, so
//     the training attention kernel runs on them (rows without padding together in one call);
//     padding columns' outputs are zero. Later calls: attention_cached (ops/attention/cached.h)
//     over the cache, the row's padding masked out.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/inference_state.h"
#include "model/decoder_layer.h"
#include "ops/attention/cached.h"

namespace titan {

namespace {

// Token rows [r0, r1) of a contiguous [rows, h * d] tensor as an [r1 - r0, h, d] view.
RowView rows_of(const Tensor& t, int64_t r0, int64_t r1, int64_t h, int64_t d) {
  return RowView::of(t.view({t.numel() / (h * d), h * d}).slice0(r0, r1), h, d);
}

}  // namespace

void DecoderModel::attend_cached(size_t l, LayerActs& a, int64_t B, int64_t S, InferenceState& c) {
  const KernelSet& k = kernels_[l];
  const int64_t Q = cfg_.q_dim(), K = cfg_.kv_dim(), D = cfg_.head_dim, W = Q + 2 * K;
  const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads, cap = c.capacity();
  const float scale = float(1.0 / std::sqrt(double(D)));
  TITAN_ASSERT(c.rows == B && c.len + S <= cap && int64_t(c.layers.size()) > int64_t(l), "inference state of ", c.rows,
               " rows and ", cap, " columns cannot take ", B, " x ", S, " more");
  for (int64_t b = 0; b < B; ++b) {
    const int64_t r0 = std::clamp<int64_t>(c.first[size_t(b)] - c.len, 0, S);  // first real new column
    if (r0 == S) continue;
    const int64_t start = c.len + r0 - c.first[size_t(b)];
    k.rope->forward_rows(exec_, rows_of(a.q, b * S + r0, b * S + S, nh, D), S - r0, start, rope_);
    k.rope->forward_rows(exec_, rows_of(a.k, b * S + r0, b * S + S, nkv, D), S - r0, start, rope_);
  }
  LayerState& st = c.layers[l];
  c.append_kv(l, a.k.data<float>(), K, a.qkv.data<float>() + Q + K, W, S);
  if (c.len > 0) {
    attention_cached(RowView::of(a.q, nh, D), st.k, st.v, c.first.data(), c.len + S, S, scale, a.attn);
    return;
  }
  prefill_attention(l, a.q, a.k, a.qkv, Q + K, a.attn, B, S, c);
}

void DecoderModel::prefill_attention(size_t l, const Tensor& q, const Tensor& kt, const Tensor& qkv, int64_t v_col,
                                     Tensor& attn, int64_t B, int64_t S, const InferenceState& c) {
  const KernelSet& k = kernels_[l];
  const int64_t Q = cfg_.q_dim(), D = cfg_.head_dim;
  const int64_t nh = cfg_.num_attention_heads, nkv = cfg_.num_key_value_heads;
  const float scale = float(1.0 / std::sqrt(double(D)));
  TITAN_ASSERT(c.len == 0 && c.rows == B, "prefill_attention: not a prefill");
  // Rows [b0, b1) without padding in one call, each padded row alone on its real columns.
  const Tensor attn2 = attn.view({B * S, Q});
  auto run = [&](int64_t r0, int64_t r1, int64_t seq) {
    Tensor out = attn2.slice0(r0, r1), lse = Tensor::empty({(r1 - r0) / seq, nh, seq}, DType::F32);
    k.attention->forward_rows(exec_, rows_of(q, r0, r1, nh, D), rows_of(kt, r0, r1, nkv, D),
                              RowView::columns(qkv.slice0(r0, r1), v_col, nkv, D), seq, scale, out, lse);
  };
  for (int64_t b = 0; b < B;) {
    if (c.first[size_t(b)] == 0) {
      int64_t e = b;
      while (e < B && c.first[size_t(e)] == 0) ++e;
      run(b * S, e * S, S);
      b = e;
      continue;
    }
    const int64_t p = c.first[size_t(b)];
    std::fill_n(attn2.data<float>() + b * S * Q, p * Q, 0.f);
    run(b * S + p, (b + 1) * S, S - p);
    ++b;
  }
}

}  // namespace titan
