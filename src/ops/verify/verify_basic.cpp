// Verification of the element-wise and matmul op families (see verify.h): embedding, gemm, linear,
// rmsnorm, rope, residual, bias.
#include <algorithm>
#include <string>
#include <tuple>

#include "core/dtype.h"
#include "ops/bias/bias.h"
#include "ops/embedding/embedding.h"
#include "ops/matmul/bf16_convert.h"
#include "ops/matmul/matmul.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/verify/verify.h"

namespace titan::verify_detail {
void verify_embedding(std::vector<VerifyRow>& rows) {
  const EmbeddingKernel& ref = kernel<EmbeddingKernel>("reference");
  const int64_t shapes[][3] = {{1, 1, 1}, {11, 7, 5}, {64, 33, 40}};  // V, H, N
  for (const auto& var : variants_to_check<EmbeddingKernel>())
    for (bool bf : {false, true})
      for (const auto& s : shapes) {
        const auto [V, H, N] = std::tuple{s[0], s[1], s[2]};
        const Tensor w = round_bf16(randn({V, H}, 1), bf), dout = round_bf16(randn({N, H}, 2), bf);
        Tensor ids = Tensor::empty({N}, DType::I64);
        for (int64_t i = 0; i < N; ++i) ids.data<int64_t>()[i] = (i * 7 + 3) % V;  // repeats when N > V
        const std::string sh = dims({{"V", V}, {"H", H}, {"N", N}});
        Tensor a = Tensor::empty({N, H}, DType::F32), b = Tensor::empty({N, H}, DType::F32);
        kernel<EmbeddingKernel>(var).forward(ids, w, a);
        ref.forward(ids, w, b);
        Diff f;
        f.add(a, b);
        emit(rows, "embedding", var, bf, sh, "forward", f, kTolF32);
        Tensor ga = randn({V, H}, 3), gb = ga.clone();
        kernel<EmbeddingKernel>(var).backward(ids, dout, ga);
        ref.backward(ids, dout, gb);
        Diff d;
        d.add(ga, gb);
        emit(rows, "embedding", var, bf, sh, "backward", d, kTolF32);
      }
}

void verify_gemm(std::vector<VerifyRow>& rows) {
  const GemmKernel& ref = kernel<GemmKernel>("reference");
  struct S {
    int64_t m, n, k;
    bool ta, tb;
    int64_t ldadd;  // > 0: with an addend R whose rows are ldadd apart (a residual input)
  } shapes[] = {{1, 1, 1, false, false, 0}, {7, 5, 13, false, true, 0}, {33, 17, 64, true, false, 0},
                {65, 31, 9, true, true, 0},  {7, 5, 13, false, true, 5}, {33, 17, 64, true, false, 20}};
  for (const auto& var : variants_to_check<GemmKernel>())
    for (bool bf : {false, true})
      for (const auto& s : shapes) {
        const Tensor A = randn({s.ta ? s.k : s.m, s.ta ? s.m : s.k}, 4), B = randn({s.tb ? s.n : s.k, s.tb ? s.k : s.n}, 5);
        const Tensor Ab = bf ? to_bf16(A) : A, Bb = bf ? to_bf16(B) : B;
        const Tensor C0 = randn({s.m, s.n}, 6), R = randn({s.m, std::max<int64_t>(s.ldadd, 1)}, 30);
        Tensor c1 = C0.clone(), c2 = C0.clone();
        auto run = [&](const GemmKernel& k, Tensor& c) {
          GemmArgs g;
          g.trans_a = s.ta, g.trans_b = s.tb, g.m = s.m, g.n = s.n, g.k = s.k, g.alpha = 0.75f, g.beta = 0.5f;
          g.a = Ab.raw(), g.b = Bb.raw(), g.c = c.data<float>(), g.in_dtype = bf ? DType::BF16 : DType::F32;
          if (s.ldadd > 0) g.add = R.data<float>(), g.ldadd = s.ldadd;
          gemm(k, g);
        };
        run(kernel<GemmKernel>(var), c1);
        run(ref, c2);
        Diff d;
        d.add(c1, c2);
        emit(rows, "gemm", var, bf,
             dims({{"M", s.m}, {"N", s.n}, {"K", s.k}, {"ta", s.ta}, {"tb", s.tb}, {"ldadd", s.ldadd}}), "forward", d,
             bf ? kTolBf16Compute : kTolF32);
      }
}

void verify_linear(std::vector<VerifyRow>& rows) {
  const LinearKernel& ref = kernel<LinearKernel>("reference");
  const int64_t shapes[][3] = {{1, 1, 1}, {7, 13, 5}, {33, 64, 17}, {70, 48, 96}};  // M, K, N
  for (const auto& var : variants_to_check<LinearKernel>())
    for (bool bf : {false, true})
      for (const auto& s : shapes) {
        const auto [M, K, N] = std::tuple{s[0], s[1], s[2]};
        const DType c = bf ? DType::BF16 : DType::F32;
        const Tensor x = randn({M, K}, 7), w = randn({N, K}, 8), dy = randn({M, N}, 9);
        const std::string sh = dims({{"M", M}, {"K", K}, {"N", N}});
        const double tol = bf ? kTolBf16Compute : kTolF32;
        Tensor y1 = Tensor::empty({M, N}, DType::F32), y2 = Tensor::empty({M, N}, DType::F32);
        kernel<LinearKernel>(var).forward(x, w, y1, c);
        ref.forward(x, w, y2, c);
        Diff f;
        f.add(y1, y2);
        emit(rows, "linear", var, bf, sh, "forward", f, tol);
        const Tensor r = randn({M, N}, 31);  // y = x W^T + r (the residual input form)
        kernel<LinearKernel>(var).forward_residual(x, w, &r, y1, c);
        ref.forward_residual(x, w, &r, y2, c);
        Diff fr;
        fr.add(y1, y2);
        emit(rows, "linear", var, bf, sh + ",residual", "forward", fr, tol);
        Tensor dx1 = Tensor::empty({M, K}, DType::F32), dx2 = dx1.clone();
        Tensor dw1 = randn({N, K}, 10), dw2 = dw1.clone();
        kernel<LinearKernel>(var).backward(x, w, dy, &dx1, &dw1, c);
        ref.backward(x, w, dy, &dx2, &dw2, c);
        Diff d;
        d.add(dx1, dx2);
        d.add(dw1, dw2);
        emit(rows, "linear", var, bf, sh, "backward", d, tol);
      }
}

void verify_rmsnorm(std::vector<VerifyRow>& rows) {
  const RMSNormKernel& ref = kernel<RMSNormKernel>("reference");
  const int64_t shapes[][2] = {{1, 1}, {7, 13}, {33, 128}, {5, 1000}};  // N, D
  for (const auto& var : variants_to_check<RMSNormKernel>())
    for (bool bf : {false, true})
      for (const auto& s : shapes) {
        const auto [N, D] = std::pair{s[0], s[1]};
        const Tensor x = round_bf16(randn({N, D}, 11), bf), w = round_bf16(randn({D}, 12), bf);
        const Tensor dy = round_bf16(randn({N, D}, 13), bf);
        const std::string sh = dims({{"N", N}, {"D", D}});
        Tensor y1 = Tensor::empty({N, D}, DType::F32), y2 = y1.clone(), r1 = Tensor::empty({N}, DType::F32),
               r2 = r1.clone();
        kernel<RMSNormKernel>(var).forward(x, w, 1e-6f, y1, r1);
        ref.forward(x, w, 1e-6f, y2, r2);
        Diff f;
        f.add(y1, y2);
        f.add(r1, r2);
        emit(rows, "rmsnorm", var, bf, sh, "forward", f, kTolF32);
        Tensor dx1 = Tensor::empty({N, D}, DType::F32), dx2 = dx1.clone(), dw1 = randn({D}, 14), dw2 = dw1.clone();
        kernel<RMSNormKernel>(var).backward(x, w, r2, dy, dx1, dw1);
        ref.backward(x, w, r2, dy, dx2, dw2);
        Diff d;
        d.add(dx1, dx2);
        d.add(dw1, dw2);
        emit(rows, "rmsnorm", var, bf, sh, "backward", d, kTolF32);
      }
  verify_rmsnorm_views(rows);
}

// The row-view forms: heads read from (and gradients written into) columns of a wider buffer, as
// the q/k norm does inside the fused qkv buffer; dx added into (backward_add); a bf16 y.
void verify_rmsnorm_views(std::vector<VerifyRow>& rows) {
  const RMSNormKernel& ref = kernel<RMSNormKernel>("reference");
  const int64_t shapes[][5] = {{5, 3, 16, 80, 8}, {33, 2, 64, 256, 64}, {7, 1, 13, 13, 0}};  // n, h, D, ld, c0
  for (const auto& var : variants_to_check<RMSNormKernel>())
    for (bool bf : {false, true})
      for (const auto& s : shapes) {
        const auto [n, h, D, ld, c0] = std::tuple{s[0], s[1], s[2], s[3], s[4]};
        const RMSNormKernel& k = kernel<RMSNormKernel>(var);
        const Tensor buf = round_bf16(randn({n, ld}, 32), bf), w = round_bf16(randn({D}, 33), bf);
        const Tensor dy = round_bf16(randn({n, h, D}, 34), bf);
        const RowView x = RowView::columns(buf, c0, h, D);
        const std::string sh = dims({{"n", n}, {"h", h}, {"D", D}, {"ld", ld}});
        // y in f32, and in bf16 for the bf16 rows
        Tensor y1 = Tensor::empty({n, h, D}, DType::F32), y2 = y1.clone();
        Tensor r1 = Tensor::empty({n * h}, DType::F32), r2 = r1.clone();
        k.forward_rows(x, w, 1e-6f, RowView::of(y1, h, D), r1);
        ref.forward_rows(x, w, 1e-6f, RowView::of(y2, h, D), r2);
        Diff f;
        f.add(y1, y2);
        f.add(r1, r2);
        emit(rows, "rmsnorm", var, bf, "view:" + sh, "forward", f, kTolF32);
        if (bf) {
          Tensor b1 = Tensor::empty({n, h, D}, DType::BF16), b2 = b1.clone();
          k.forward_rows(x, w, 1e-6f, RowView::of(b1, h, D), r1);
          ref.forward_rows(x, w, 1e-6f, RowView::of(b2, h, D), r2);
          Diff fb;
          fb.add(b1.to(DType::F32), b2.to(DType::F32));
          emit(rows, "rmsnorm", var, bf, "view:" + sh + ",y=bf16", "forward", fb, kTolBf16Compute);
        }
        // dx overwritten in place of its columns, then added into them
        for (bool acc : {false, true}) {
          Tensor g1 = randn({n, ld}, 35), g2 = g1.clone(), dw1 = randn({D}, 36), dw2 = dw1.clone();
          const RowView dx1 = RowView::columns(g1, c0, h, D), dx2 = RowView::columns(g2, c0, h, D);
          k.backward_rows(x, w, r2, RowView::of(dy, h, D), dx1, dw1, acc);
          ref.backward_rows(x, w, r2, RowView::of(dy, h, D), dx2, dw2, acc);
          Diff d;
          d.add(g1, g2);  // the columns outside the view must stay as they were
          d.add(dw1, dw2);
          emit(rows, "rmsnorm", var, bf, "view:" + sh + (acc ? ",dx+=" : ""), "backward", d, kTolF32);
        }
      }
}

void verify_rope(std::vector<VerifyRow>& rows) {
  const RopeKernel& ref = kernel<RopeKernel>("reference");
  const int64_t shapes[][5] = {{1, 1, 1, 1, 2}, {2, 7, 4, 2, 16}, {1, 33, 5, 1, 10}, {2, 64, 8, 4, 128}};
  for (const auto& var : variants_to_check<RopeKernel>())
    for (bool bf : {false, true})
      for (const auto& s : shapes) {
        const auto [B, S, Hq, Hkv, D] = std::tuple{s[0], s[1], s[2], s[3], s[4]};
        const RopeCache cache = make_rope_cache(1000000.0, D, S + 5);
        // The fused kernel computes every element with the reference's operations: bit-exact.
        const bool exact = var == "fused";
        for (const auto& [name, H, stream] : {std::tuple{"q", Hq, 15}, std::tuple{"k", Hkv, 16}}) {
          const Tensor x = round_bf16(randn({B, S, H, D}, uint64_t(stream), 2.0), bf);
          const std::string sh = std::string(name) + ":" + dims({{"B", B}, {"S", S}, {"H", H}, {"D", D}});
          Tensor a = x.clone(), b = x.clone();
          kernel<RopeKernel>(var).forward(a, cache);
          ref.forward(b, cache);
          Diff f;
          f.add(a, b);
          emit(rows, "rope", var, bf, sh, "forward", f, kTolF32, exact);
          Tensor ga = x.clone(), gb = x.clone();
          kernel<RopeKernel>(var).backward(ga, cache);
          ref.backward(gb, cache);
          Diff d;
          d.add(ga, gb);
          emit(rows, "rope", var, bf, sh, "backward", d, kTolF32, exact);
        }
      }
  // Row views: the k heads of a fused [B * S, ld] buffer, rotated in place, from position `start`.
  const int64_t views[][7] = {{2, 7, 2, 16, 96, 32, 3}, {1, 33, 1, 10, 40, 20, 0}};  // B, S, H, D, ld, c0, start
  for (const auto& var : variants_to_check<RopeKernel>())
    for (bool bf : {false, true})
      for (const auto& v : views) {
        const auto [B, S, H, D, ld, c0, start] = std::tuple{v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
        const RopeCache cache = make_rope_cache(1000000.0, D, start + S);
        const Tensor buf = round_bf16(randn({B * S, ld}, 37, 2.0), bf);
        const std::string sh = "view:" + dims({{"B", B}, {"S", S}, {"H", H}, {"D", D}, {"ld", ld}, {"start", start}});
        for (bool fwd : {true, false}) {
          Tensor a = buf.clone(), b = buf.clone();
          const RowView va = RowView::columns(a, c0, H, D), vb = RowView::columns(b, c0, H, D);
          if (fwd) {
            kernel<RopeKernel>(var).forward_rows(va, S, start, cache);
            ref.forward_rows(vb, S, start, cache);
          } else {
            kernel<RopeKernel>(var).backward_rows(va, S, start, cache);
            ref.backward_rows(vb, S, start, cache);
          }
          Diff d;
          d.add(a, b);
          emit(rows, "rope", var, bf, sh, fwd ? "forward" : "backward", d, kTolF32, var == "fused");
        }
      }
}

void verify_residual(std::vector<VerifyRow>& rows) {
  const ResidualKernel& ref = kernel<ResidualKernel>("reference");
  const int64_t shapes[][2] = {{1, 1}, {7, 13}, {33, 1000}};
  for (const auto& var : variants_to_check<ResidualKernel>())
    for (bool bf : {false, true})
      for (const auto& s : shapes) {
        const Tensor a = round_bf16(randn({s[0], s[1]}, 17), bf), b = round_bf16(randn({s[0], s[1]}, 18), bf);
        const std::string sh = dims({{"N", s[0]}, {"D", s[1]}});
        Tensor y1 = Tensor::empty(a.shape(), DType::F32), y2 = y1.clone();
        kernel<ResidualKernel>(var).forward(a, b, y1);
        ref.forward(a, b, y2);
        Diff f;
        f.add(y1, y2);
        emit(rows, "residual", var, bf, sh, "forward", f, kTolF32);
        Tensor d1 = a.clone(), d2 = a.clone();
        kernel<ResidualKernel>(var).accumulate(d1, b);
        ref.accumulate(d2, b);
        Diff d;
        d.add(d1, d2);
        emit(rows, "residual", var, bf, sh, "backward", d, kTolF32);
      }
}

void verify_bias(std::vector<VerifyRow>& rows) {
  const BiasKernel& ref = kernel<BiasKernel>("reference");
  const int64_t shapes[][2] = {{1, 1}, {7, 13}, {70, 96}, {300, 65}};  // M, N
  for (const auto& var : variants_to_check<BiasKernel>())
    for (bool bf : {false, true})
      for (const auto& s : shapes) {
        const Tensor y = round_bf16(randn({s[0], s[1]}, 32), bf), b = round_bf16(randn({s[1]}, 33), bf);
        const std::string sh = dims({{"M", s[0]}, {"N", s[1]}});
        Tensor y1 = y.clone(), y2 = y.clone();
        kernel<BiasKernel>(var).forward(y1, b);
        ref.forward(y2, b);
        Diff f;
        f.add(y1, y2);
        emit(rows, "bias", var, bf, sh, "forward", f, kTolF32);
        Tensor d1 = b.clone(), d2 = b.clone();  // accumulates into an existing gradient
        kernel<BiasKernel>(var).backward(y, d1);
        ref.backward(y, d2);
        Diff d;
        d.add(d1, d2);
        emit(rows, "bias", var, bf, sh, "backward", d, kTolF32);
      }
}

}  // namespace titan::verify_detail
