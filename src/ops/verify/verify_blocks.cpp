// Verification of the larger op families (see verify.h): attention, swiglu, cross_entropy, adamw, moe.
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "ops/adamw/adamw.h"
#include "ops/attention/attention.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/moe/moe.h"
#include "ops/swiglu/swiglu.h"
#include "ops/verify/verify.h"

namespace titan::verify_detail {

void verify_attention(std::vector<VerifyRow>& rows) {
  const AttentionKernel& ref = kernel<AttentionKernel>("reference");
  const int64_t shapes[][5] = {{1, 1, 1, 1, 4}, {2, 7, 4, 2, 16}, {1, 65, 4, 1, 8}, {1, 130, 2, 2, 64}};
  for (const auto& var : variants_to_check<AttentionKernel>())
    for (bool bf : {false, true})
      for (const auto& s : shapes) {
        const auto [B, S, Hq, Hkv, D] = std::tuple{s[0], s[1], s[2], s[3], s[4]};
        const Tensor q = round_bf16(randn({B, S, Hq, D}, 21), bf), k = round_bf16(randn({B, S, Hkv, D}, 22), bf);
        const Tensor v = round_bf16(randn({B, S, Hkv, D}, 23), bf), dout = round_bf16(randn({B, S, Hq, D}, 24), bf);
        const float scale = float(1.0 / std::sqrt(double(D)));
        const std::string sh = dims({{"B", B}, {"S", S}, {"Hq", Hq}, {"Hkv", Hkv}, {"D", D}});
        Tensor o1 = Tensor::empty(q.shape(), DType::F32), o2 = o1.clone();
        Tensor l1 = Tensor::empty({B, Hq, S}, DType::F32), l2 = l1.clone();
        kernel<AttentionKernel>(var).forward(q, k, v, scale, o1, l1);
        ref.forward(q, k, v, scale, o2, l2);
        Diff f;
        f.add(o1, o2);
        f.add(l1, l2);
        emit(rows, "attention", var, bf, sh, "forward", f, kTolF32);
        Tensor dq1 = Tensor::empty(q.shape(), DType::F32), dq2 = dq1.clone();
        Tensor dk1 = Tensor::empty(k.shape(), DType::F32), dk2 = dk1.clone(), dv1 = dk1.clone(), dv2 = dk1.clone();
        kernel<AttentionKernel>(var).backward(q, k, v, o2, l2, dout, scale, dq1, dk1, dv1);
        ref.backward(q, k, v, o2, l2, dout, scale, dq2, dk2, dv2);
        Diff d;
        d.add(dq1, dq2);
        d.add(dk1, dk2);
        d.add(dv1, dv2);
        emit(rows, "attention", var, bf, sh, "backward", d, kTolF32);
      }
  // Row views: q, k, v as the columns of one fused [B * S, Q + 2K] buffer (as the model's qkv
  // projection output), dq, dk, dv written into the columns of another.
  const int64_t views[][5] = {{2, 7, 4, 2, 16}, {1, 70, 2, 1, 8}};
  for (const auto& var : variants_to_check<AttentionKernel>())
    for (bool bf : {false, true})
      for (const auto& s : views) {
        const auto [B, S, Hq, Hkv, D] = std::tuple{s[0], s[1], s[2], s[3], s[4]};
        const int64_t Q = Hq * D, K = Hkv * D, W = Q + 2 * K;
        const Tensor qkv = round_bf16(randn({B * S, W}, 38), bf), dout = round_bf16(randn({B, S, Hq, D}, 39), bf);
        const RowView q = RowView::columns(qkv, 0, Hq, D), k = RowView::columns(qkv, Q, Hkv, D),
                      v = RowView::columns(qkv, Q + K, Hkv, D);
        const float scale = float(1.0 / std::sqrt(double(D)));
        const std::string sh = "view:" + dims({{"B", B}, {"S", S}, {"Hq", Hq}, {"Hkv", Hkv}, {"D", D}});
        Tensor o1 = Tensor::empty({B, S, Hq, D}, DType::F32), o2 = o1.clone();
        Tensor l1 = Tensor::empty({B, Hq, S}, DType::F32), l2 = l1.clone();
        kernel<AttentionKernel>(var).forward_rows(q, k, v, S, scale, o1, l1);
        ref.forward_rows(q, k, v, S, scale, o2, l2);
        Diff f;
        f.add(o1, o2);
        f.add(l1, l2);
        emit(rows, "attention", var, bf, sh, "forward", f, kTolF32);
        Tensor g1 = randn({B * S, W}, 40), g2 = g1.clone();
        auto grads = [&](const Tensor& g) {
          return std::tuple{RowView::columns(g, 0, Hq, D), RowView::columns(g, Q, Hkv, D),
                            RowView::columns(g, Q + K, Hkv, D)};
        };
        const auto [dq1, dk1, dv1] = grads(g1);
        const auto [dq2, dk2, dv2] = grads(g2);
        kernel<AttentionKernel>(var).backward_rows(q, k, v, o2, l2, dout, S, scale, dq1, dk1, dv1);
        ref.backward_rows(q, k, v, o2, l2, dout, S, scale, dq2, dk2, dv2);
        Diff d;
        d.add(g1, g2);
        emit(rows, "attention", var, bf, sh, "backward", d, kTolF32);
      }
  // Block-causal: packed documents of lengths 1, 63, 9, 57 (and one whole row), each token seeing
  // only its own document's prefix.
  {
    const int64_t B = 2, S = 130, Hq = 4, Hkv = 2, D = 16;
    std::vector<int64_t> seg;
    for (int64_t n : {1, 63, 9, 57})
      for (int64_t i = 0, a = int64_t(seg.size()); i < n; ++i) seg.push_back(a);
    for (int64_t i = 0; i < S; ++i) seg.push_back(0);
    for (const auto& var : variants_to_check<AttentionKernel>())
      for (bool bf : {false, true}) {
        const Tensor q = round_bf16(randn({B, S, Hq, D}, 41), bf), k = round_bf16(randn({B, S, Hkv, D}, 42), bf);
        const Tensor v = round_bf16(randn({B, S, Hkv, D}, 43), bf), dout = round_bf16(randn({B, S, Hq, D}, 44), bf);
        const float scale = float(1.0 / std::sqrt(double(D)));
        const std::string sh = "block_causal:" + dims({{"B", B}, {"S", S}, {"Hq", Hq}, {"Hkv", Hkv}, {"D", D}});
        Tensor o1 = Tensor::empty(q.shape(), DType::F32), o2 = o1.clone();
        Tensor l1 = Tensor::empty({B, Hq, S}, DType::F32), l2 = l1.clone();
        kernel<AttentionKernel>(var).forward(q, k, v, scale, o1, l1, seg.data());
        ref.forward(q, k, v, scale, o2, l2, seg.data());
        Diff f;
        f.add(o1, o2);
        f.add(l1, l2);
        emit(rows, "attention", var, bf, sh, "forward", f, kTolF32);
        Tensor dq1 = Tensor::empty(q.shape(), DType::F32), dq2 = dq1.clone();
        Tensor dk1 = Tensor::empty(k.shape(), DType::F32), dk2 = dk1.clone(), dv1 = dk1.clone(), dv2 = dk1.clone();
        kernel<AttentionKernel>(var).backward(q, k, v, o2, l2, dout, scale, dq1, dk1, dv1, seg.data());
        ref.backward(q, k, v, o2, l2, dout, scale, dq2, dk2, dv2, seg.data());
        Diff d;
        d.add(dq1, dq2);
        d.add(dk1, dk2);
        d.add(dv1, dv2);
        emit(rows, "attention", var, bf, sh, "backward", d, kTolF32);
      }
  }
}

void verify_swiglu(std::vector<VerifyRow>& rows) {
  const SwiGLUKernel& ref = kernel<SwiGLUKernel>("reference");
  const int64_t shapes[][2] = {{1, 1}, {7, 13}, {33, 100}};  // N, I
  for (const auto& var : variants_to_check<SwiGLUKernel>())
    for (bool bf : {false, true})
      for (const auto& s : shapes) {
        const auto [N, I] = std::pair{s[0], s[1]};
        const Tensor gu = round_bf16(randn({N, 2 * I}, 25, 3.0), bf), dout = round_bf16(randn({N, I}, 26), bf);
        const std::string sh = dims({{"N", N}, {"I", I}});
        Tensor y1 = Tensor::empty({N, I}, DType::F32), y2 = y1.clone();
        kernel<SwiGLUKernel>(var).forward(gu, y1);
        ref.forward(gu, y2);
        Diff f;
        f.add(y1, y2);
        emit(rows, "swiglu", var, bf, sh, "forward", f, kTolF32);
        Tensor d1 = Tensor::empty(gu.shape(), DType::F32), d2 = d1.clone();
        kernel<SwiGLUKernel>(var).backward(gu, dout, d1);
        ref.backward(gu, dout, d2);
        Diff d;
        d.add(d1, d2);
        emit(rows, "swiglu", var, bf, sh, "backward", d, kTolF32);
        if (!bf) continue;
        // BF16 outputs (the inputs of the bf16 GEMMs after it): within one bf16 rounding.
        Tensor b1 = Tensor::empty({N, I}, DType::BF16), b2 = b1.clone();
        kernel<SwiGLUKernel>(var).forward(gu, b1);
        ref.forward(gu, b2);
        Diff fb;
        fb.add(b1.to(DType::F32), b2.to(DType::F32));
        emit(rows, "swiglu", var, bf, sh + ",out=bf16", "forward", fb, kTolBf16Compute);
        Tensor db1 = Tensor::empty(gu.shape(), DType::BF16), db2 = db1.clone();
        kernel<SwiGLUKernel>(var).backward(gu, dout, db1);
        ref.backward(gu, dout, db2);
        Diff dbd;
        dbd.add(db1.to(DType::F32), db2.to(DType::F32));
        emit(rows, "swiglu", var, bf, sh + ",dgu=bf16", "backward", dbd, kTolBf16Compute);
      }
}

void verify_cross_entropy(std::vector<VerifyRow>& rows) {
  const CrossEntropyKernel& ref = kernel<CrossEntropyKernel>("reference");
  const int64_t shapes[][3] = {{1, 4, 3}, {7, 16, 37}, {33, 24, 300}, {9, 40, 4099}};  // N, H, V
  for (const auto& var : variants_to_check<CrossEntropyKernel>())
    for (bool bf : {false, true})
      for (const auto& s : shapes) {
        const auto [N, H, V] = std::tuple{s[0], s[1], s[2]};
        const DType c = bf ? DType::BF16 : DType::F32;
        const double tol = bf ? kTolBf16Compute : kTolF32;
        const Tensor h = randn({N, H}, 27), w = randn({V, H}, 28, 0.3);
        Tensor labels = Tensor::empty({N}, DType::I64);
        for (int64_t n = 0; n < N; ++n) labels.data<int64_t>()[n] = (n % 4 == 3) ? kIgnoreIndex : (n * 13 + 5) % V;
        const std::string sh = dims({{"N", N}, {"H", H}, {"V", V}});
        Tensor lg1 = Tensor::empty({N, V}, DType::F32), lg2 = lg1.clone();
        Diff f;
        f.add_scalar(kernel<CrossEntropyKernel>(var).forward(h, w, labels, &lg1, c), ref.forward(h, w, labels, &lg2, c));
        f.add(lg1, lg2);
        emit(rows, "cross_entropy", var, bf, sh, "forward", f, tol);
        Tensor dh1 = Tensor::empty({N, H}, DType::F32), dh2 = dh1.clone(), dw1 = randn({V, H}, 29, 0.01),
               dw2 = dw1.clone();
        Diff d;
        d.add_scalar(kernel<CrossEntropyKernel>(var).forward_backward(h, w, labels, 0.25f, dh1, dw1, c),
                     ref.forward_backward(h, w, labels, 0.25f, dh2, dw2, c));
        d.add(dh1, dh2);
        d.add(dw1, dw2);
        emit(rows, "cross_entropy", var, bf, sh, "backward", d, tol);
      }
}

void verify_adamw(std::vector<VerifyRow>& rows) {
  const AdamWKernel& ref = kernel<AdamWKernel>("reference");
  for (const auto& var : variants_to_check<AdamWKernel>())
    for (bool bf : {false, true})
      for (int64_t n : {int64_t(1), int64_t(37), int64_t(4099)}) {
        const Tensor p = round_bf16(randn({n}, 30), bf), g = round_bf16(randn({n}, 31), bf);
        const Tensor m = round_bf16(randn({n}, 32, 0.1), bf);
        Tensor v = round_bf16(randn({n}, 33, 0.1), bf);
        for (int64_t i = 0; i < n; ++i) v.data<float>()[i] = std::fabs(v.data<float>()[i]);
        AdamWParams hp;
        hp.lr = 3e-3f, hp.weight_decay = 0.1f, hp.step = 7;
        Tensor p1 = p.clone(), p2 = p.clone(), m1 = m.clone(), m2 = m.clone(), v1 = v.clone(), v2 = v.clone();
        kernel<AdamWKernel>(var).step(p1, g, m1, v1, hp);
        ref.step(p2, g, m2, v2, hp);
        Diff d;
        d.add(p1, p2);
        d.add(m1, m2);
        d.add(v1, v2);
        emit(rows, "adamw", var, bf, dims({{"N", n}}), "step", d, kTolF32);
      }
}

void verify_moe(std::vector<VerifyRow>& rows) {
  const MoEKernel& ref = kernel<MoEKernel>("reference");
  struct S {
    int64_t T, H, E, I, K;
    bool norm;
  } shapes[] = {{1, 8, 4, 4, 1, true}, {7, 13, 5, 9, 2, true}, {33, 17, 9, 11, 3, false}, {40, 24, 16, 6, 4, true}};
  for (const auto& var : variants_to_check<MoEKernel>())
    for (bool bf : {false, true})
      for (const auto& s : shapes) {
        const Tensor x = randn({s.T, s.H}, 34), router = randn({s.E, s.H}, 35, 0.5);
        const Tensor gate_up = randn({s.E, 2 * s.I, s.H}, 36, 0.3), down = randn({s.E, s.H, s.I}, 37, 0.3);
        const Tensor dy = randn({s.T, s.H}, 38);
        MoEArgs a;
        a.x = &x, a.router = &router, a.gate_up = &gate_up, a.down = &down, a.top_k = s.K, a.norm_topk_prob = s.norm;
        a.compute = bf ? DType::BF16 : DType::F32;
        const double tol = bf ? kTolBf16Compute : kTolF32;
        const std::string sh =
            dims({{"T", s.T}, {"H", s.H}, {"E", s.E}, {"I", s.I}, {"K", s.K}, {"norm", s.norm}});
        Tensor y1 = Tensor::empty({s.T, s.H}, DType::F32), y2 = y1.clone();
        MoESaved s1, s2;
        kernel<MoEKernel>(var).forward(a, y1, s1);
        ref.forward(a, y2, s2);
        Diff f;
        f.add(y1, y2);
        f.add(s1.logits, s2.logits);
        for (int64_t i = 0; i < s1.topk_idx.numel(); ++i)  // a different expert choice fails the row
          f.add_scalar(s1.topk_idx.data<int32_t>()[i] == s2.topk_idx.data<int32_t>()[i] ? 0.0 : INFINITY, 0.0);
        emit(rows, "moe", var, bf, sh, "forward", f, tol);
        Tensor dx1 = Tensor::empty(x.shape(), DType::F32), dx2 = dx1.clone();
        Tensor dr1 = Tensor::zeros(router.shape(), DType::F32), dr2 = dr1.clone();
        Tensor dg1 = Tensor::zeros(gate_up.shape(), DType::F32), dg2 = dg1.clone();
        Tensor dd1 = Tensor::zeros(down.shape(), DType::F32), dd2 = dd1.clone();
        MoEGrads g1, g2;
        g1.dx = &dx1, g1.drouter = &dr1, g1.dgate_up = &dg1, g1.ddown = &dd1;
        g2.dx = &dx2, g2.drouter = &dr2, g2.dgate_up = &dg2, g2.ddown = &dd2;
        kernel<MoEKernel>(var).backward(a, s1, dy, g1);
        ref.backward(a, s2, dy, g2);
        Diff d;
        d.add(dx1, dx2);
        d.add(dr1, dr2);
        d.add(dg1, dg2);
        d.add(dd1, dd2);
        emit(rows, "moe", var, bf, sh, "backward", d, tol);
      }
}

}  // namespace titan::verify_detail
