// The decoder's context-parallel attention (model/context_parallel.h): K and V all-gathered over
// the cp group into whole sequences, each local chunk (each packed document's part of it)
// attended as a suffix of the keys up to its end, and in the backward dK and dV of the whole
// sequences reduce-scattered to the ranks that hold their tokens.
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/threading.h"
#include "model/decoder_layer.h"
#include "ops/copy/copy_rows.h"

namespace titan {

using namespace layer_util;

namespace {

// Calls f(local row a, global token g, length n, first key k0) for each run of one sequence's
// chunk that attends as one suffix: the whole chunk, or with packed documents each document's part
// of it (its keys start at the document's first token).
template <class F>
void for_each_run(const SeqChunk& c, const int64_t* ds, F&& f) {
  for (int64_t a = c.local, e; a < c.local + c.len; a = e) {
    e = a + 1;
    while (e < c.local + c.len && (!ds || ds[e] == ds[a])) ++e;
    f(a, c.global + (a - c.local), e - a, ds ? ds[a] : 0);
  }
}

// Rows [r0, r0 + n) of a contiguous [rows, ...] tensor of `w` elements per row, as a flat view.
Tensor flat_rows(const Tensor& t, int64_t w, int64_t r0, int64_t n) { return t.view({t.numel()}).slice0(r0 * w, (r0 + n) * w); }

}  // namespace

Tensor DecoderModel::cp_gather_sequence(const RowView& x, int64_t B, int64_t S, const Positions& pos) const {
  const int64_t n = cp_.size(), Sg = pos.global_seq, w = x.h * x.d;
  Tensor mine = f32({B * S, w});  // the view's rows, packed
  copy_rows(exec_, x, RowView::of(mine, x.h, x.d));
  Tensor all = f32({n, B * S, w});
  cp_.comm->all_gather(mine.data<float>(), all.data<float>(), mine.numel());
  Tensor global = f32({B, Sg, x.h, x.d});
  const float* a = all.data<float>();
  float* g = global.data<float>();
  for (int64_t r = 0; r < n; ++r)
    for (const SeqChunk& c : cp_chunks(Sg, n, r, cp_.head_tail))
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(g + (b * Sg + c.global) * w, a + ((r * B + b) * S + c.local) * w, size_t(c.len * w) * sizeof(float));
  return global;
}

void DecoderModel::cp_reduce_scatter_sequence(const Tensor& global, int64_t B, int64_t S, const Positions& pos,
                                              const RowView& dst) const {
  const int64_t n = cp_.size(), Sg = pos.global_seq, w = dst.h * dst.d;
  // Rank-major: block r holds rank r's tokens in its local order, so the reduce-scatter's block r
  // is what rank r keeps.
  Tensor blocks = f32({n, B * S, w});
  const float* g = global.data<float>();
  float* bl = blocks.data<float>();
  for (int64_t r = 0; r < n; ++r)
    for (const SeqChunk& c : cp_chunks(Sg, n, r, cp_.head_tail))
      for (int64_t b = 0; b < B; ++b)
        std::memcpy(bl + ((r * B + b) * S + c.local) * w, g + (b * Sg + c.global) * w, size_t(c.len * w) * sizeof(float));
  Tensor mine = f32({B * S, w});
  cp_.comm->reduce_scatter(blocks.data<float>(), mine.data<float>(), mine.numel(), comm::ReduceOp::Sum);
  copy_rows(exec_, RowView::of(mine, dst.h, dst.d), dst);
}

void DecoderModel::cp_attention_forward(const AttentionKernel& k, const RowView& q, const RowView& kk,
                                        const RowView& v, int64_t B, int64_t S, const Positions& pos, float scale,
                                        Tensor& out, Tensor& lse) const {
  const int64_t Sg = pos.global_seq, nh = q.h, D = q.d;
  const Tensor kg = cp_gather_sequence(kk, B, S, pos), vg = cp_gather_sequence(v, B, S, pos);
  const RowView kgv = RowView::of(kg, kk.h, D), vgv = RowView::of(vg, v.h, D);
  float* L = lse.data<float>();  // [B, nh, S]
  for (int64_t b = 0; b < B; ++b)
    for (const SeqChunk& c : *pos.chunks)
      for_each_run(c, pos.doc_start ? pos.doc_start + b * S : nullptr, [&](int64_t a, int64_t g, int64_t len, int64_t k0) {
        Tensor o = flat_rows(out, nh * D, b * S + a, len), l = f32({1, nh, len});
        const int64_t sk = g + len - k0;
        k.forward_rows_suffix(exec_, q.rows(b * S + a, len), kgv.rows(b * Sg + k0, sk), vgv.rows(b * Sg + k0, sk), len,
                              sk, scale, o, l);
        for (int64_t h = 0; h < nh; ++h) std::copy_n(l.data<float>() + h * len, len, L + (b * nh + h) * S + a);
      });
}

void DecoderModel::cp_attention_backward(const AttentionKernel& k, const RowView& q, const RowView& kk,
                                         const RowView& v, const Tensor& out, const Tensor& lse, const Tensor& dout,
                                         int64_t B, int64_t S, const Positions& pos, float scale, const RowView& dq,
                                         const RowView& dk, const RowView& dv) const {
  const int64_t Sg = pos.global_seq, nh = q.h, nkv = kk.h, D = q.d;
  // K and V gathered again rather than kept from the forward: per rank the layer then holds only
  // its own tokens' activations between the passes.
  const Tensor kg = cp_gather_sequence(kk, B, S, pos), vg = cp_gather_sequence(v, B, S, pos);
  const RowView kgv = RowView::of(kg, nkv, D), vgv = RowView::of(vg, nkv, D);
  Tensor dkg = Tensor::zeros({B, Sg, nkv, D}, DType::F32), dvg = Tensor::zeros({B, Sg, nkv, D}, DType::F32);
  const float* L = lse.data<float>();
  const int64_t w = nkv * D;
  for (int64_t b = 0; b < B; ++b)
    for (const SeqChunk& c : *pos.chunks)
      for_each_run(c, pos.doc_start ? pos.doc_start + b * S : nullptr, [&](int64_t a, int64_t g, int64_t len, int64_t k0) {
        const int64_t sk = g + len - k0;
        Tensor l = f32({1, nh, len}), pk = f32({sk, nkv, D}), pv = f32({sk, nkv, D});
        for (int64_t h = 0; h < nh; ++h) std::copy_n(L + (b * nh + h) * S + a, len, l.data<float>() + h * len);
        k.backward_rows_suffix(exec_, q.rows(b * S + a, len), kgv.rows(b * Sg + k0, sk), vgv.rows(b * Sg + k0, sk),
                               flat_rows(out, nh * D, b * S + a, len), l, flat_rows(dout, nh * D, b * S + a, len), len,
                               sk, scale, dq.rows(b * S + a, len), RowView::of(pk, nkv, D), RowView::of(pv, nkv, D));
        float* dkd = dkg.data<float>() + (b * Sg + k0) * w;
        float* dvd = dvg.data<float>() + (b * Sg + k0) * w;
        const float *pkd = pk.data<float>(), *pvd = pv.data<float>();
        parallel_for(sk * w, 4096, [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) dkd[i] += pkd[i], dvd[i] += pvd[i];
        });
      });
  cp_reduce_scatter_sequence(dkg, B, S, pos, dk);
  cp_reduce_scatter_sequence(dvg, B, S, pos, dv);
}

}  // namespace titan
