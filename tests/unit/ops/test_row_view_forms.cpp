// The in-place forms of the elementwise ops (ops/row_view.h): strided row views into a wider
// buffer, RMSNorm's dx += backward, BF16 outputs of RMSNorm and SwiGLU, RoPE from a start
// position. Each form against the contiguous form of the same variant (bitwise: a view only
// changes where rows are found, not the arithmetic) and cpu against reference, odd sizes included;
// columns outside a view are never touched.
#include <tuple>

#include "ops/matmul/bf16_convert.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/swiglu/swiglu.h"
#include "op_test_util.h"

using namespace titan;
using namespace titan::optest;

namespace {

// Views of h vectors of length d at column c0 of an [n, ld] buffer.
struct ViewCase {
  int64_t n, h, d, ld, c0;
};
const ViewCase kViews[] = {{1, 1, 1, 3, 1}, {5, 3, 16, 80, 8}, {17, 2, 7, 31, 16}, {33, 4, 64, 384, 128}};

// The view's vectors copied out as a contiguous [n, h, d] tensor.
Tensor gather(const RowView& v) {
  Tensor t = Tensor::empty({v.n, v.h, v.d}, DType::F32);
  const auto p = v.ptr<float>();
  for (int64_t i = 0; i < v.vectors(); ++i)
    for (int64_t j = 0; j < v.d; ++j) t.data<float>()[i * v.d + j] = p.vec(i)[j];
  return t;
}

// Every element of `buf` outside the view's columns equals `orig`.
::testing::AssertionResult outside_untouched(const Tensor& buf, const Tensor& orig, const ViewCase& c) {
  for (int64_t r = 0; r < c.n; ++r)
    for (int64_t j = 0; j < c.ld; ++j) {
      if (j >= c.c0 && j < c.c0 + c.h * c.d) continue;
      if (buf.data<float>()[r * c.ld + j] != orig.data<float>()[r * c.ld + j])
        return ::testing::AssertionFailure() << "element (" << r << ", " << j << ") outside the view changed";
    }
  return ::testing::AssertionSuccess();
}

Tensor as_f32(const Tensor& t) { return t.to(DType::F32); }

}  // namespace

TEST(RMSNormRows, ViewsAccumulateAndBf16OutputMatchTheContiguousForm) {
  for (const char* variant : {"reference", "cpu"}) {
    const auto& k = kernel<RMSNormKernel>(variant);
    for (const ViewCase& c : kViews) {
      SCOPED_TRACE(std::string(variant) + " n=" + std::to_string(c.n) + " d=" + std::to_string(c.d));
      const Tensor buf = randn({c.n, c.ld}, uint64_t(c.n * 7 + c.d), 2.0), w = randn({c.d}, 3, 0.3, 1.0);
      const RowView x = RowView::columns(buf, c.c0, c.h, c.d);
      const Tensor xc = gather(x);  // [n, h, d] contiguous copy
      const int64_t N = c.n * c.h;
      // forward: view in, contiguous out (and the reverse) equals contiguous in and out
      Tensor y = Tensor::empty({c.n, c.h, c.d}, DType::F32), rstd = Tensor::empty({N}, DType::F32);
      Tensor yc = y.clone(), rc = rstd.clone();
      k.forward_rows(ExecContext::host(), x, w, 1e-6f, RowView::of(y, c.h, c.d), rstd);
      k.forward(ExecContext::host(), xc.view({N, c.d}), w, 1e-6f, yc, rc);
      EXPECT_TRUE(bitwise_equal(y, yc) && bitwise_equal(rstd, rc));
      Tensor ybuf = randn({c.n, c.ld}, 9), ybuf0 = ybuf.clone();
      k.forward_rows(ExecContext::host(), RowView::of(xc, c.h, c.d), w, 1e-6f, RowView::columns(ybuf, c.c0, c.h, c.d),
                     rstd);
      EXPECT_TRUE(bitwise_equal(gather(RowView::columns(ybuf, c.c0, c.h, c.d)), yc));
      EXPECT_TRUE(outside_untouched(ybuf, ybuf0, c));
      // a BF16 y is the rounding of the f32 y
      Tensor yb = Tensor::empty({c.n, c.h, c.d}, DType::BF16);
      k.forward_rows(ExecContext::host(), x, w, 1e-6f, RowView::of(yb, c.h, c.d), rstd);
      EXPECT_TRUE(bitwise_equal(as_f32(yb), as_f32(to_bf16(yc))));
      // backward into a view: overwrite, then add into what is there
      const Tensor dy = randn({c.n, c.h, c.d}, uint64_t(c.d + 11));
      Tensor dxc = Tensor::empty({N, c.d}, DType::F32), dwc = randn({c.d}, 4), dw = dwc.clone();
      k.backward(ExecContext::host(), xc.view({N, c.d}), w, rc, dy.view({N, c.d}), dxc, dwc);
      for (bool acc : {false, true}) {
        Tensor g = randn({c.n, c.ld}, 12), g0 = g.clone(), dw1 = dw.clone();
        const RowView dx = RowView::columns(g, c.c0, c.h, c.d);
        k.backward_rows(ExecContext::host(), x, w, rc, RowView::of(dy, c.h, c.d), dx, dw1, acc);
        EXPECT_TRUE(bitwise_equal(dw1, dwc)) << "acc " << acc;
        Tensor want = dxc.clone();
        if (acc) {  // old + dx, summed once per element
          const Tensor old = gather(RowView::columns(g0, c.c0, c.h, c.d));
          for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] += old.data<float>()[i];
        }
        EXPECT_TRUE(close(gather(dx), want, 1e-6, 1e-6)) << "acc " << acc;
        EXPECT_TRUE(outside_untouched(g, g0, c)) << "acc " << acc;
      }
      // dx in place of dy (the same view): the q/k norm's backward inside the fused gradient
      Tensor g = randn({c.n, c.ld}, 13);
      const RowView dv = RowView::columns(g, c.c0, c.h, c.d);
      const Tensor dyv = gather(dv);
      Tensor dx2 = Tensor::empty({N, c.d}, DType::F32), dw2 = dw.clone(), dw3 = dw.clone();
      k.backward(ExecContext::host(), xc.view({N, c.d}), w, rc, dyv.view({N, c.d}), dx2, dw2);
      k.backward_rows(ExecContext::host(), x, w, rc, dv, dv, dw3, false);
      EXPECT_TRUE(bitwise_equal(gather(dv).view({N, c.d}), dx2) && bitwise_equal(dw3, dw2));
    }
  }
}

TEST(RMSNormRows, CpuMatchesReferenceOnViews) {
  const auto& ref = kernel<RMSNormKernel>("reference");
  const auto& cpu = kernel<RMSNormKernel>("cpu");
  for (const ViewCase& c : kViews) {
    const Tensor buf = randn({c.n, c.ld}, uint64_t(c.ld), 2.0), w = randn({c.d}, 5, 0.3, 1.0);
    const RowView x = RowView::columns(buf, c.c0, c.h, c.d);
    Tensor y1 = Tensor::empty({c.n, c.h, c.d}, DType::F32), y2 = y1.clone();
    Tensor r1 = Tensor::empty({c.n * c.h}, DType::F32), r2 = r1.clone();
    cpu.forward_rows(ExecContext::host(), x, w, 1e-6f, RowView::of(y1, c.h, c.d), r1);
    ref.forward_rows(ExecContext::host(), x, w, 1e-6f, RowView::of(y2, c.h, c.d), r2);
    EXPECT_TRUE(close(y1, y2, 1e-6, 2e-6));
    const Tensor dy = randn({c.n, c.h, c.d}, 6);
    Tensor g1 = randn({c.n, c.ld}, 7), g2 = g1.clone(), dw1 = randn({c.d}, 8), dw2 = dw1.clone();
    cpu.backward_rows(ExecContext::host(), x, w, r2, RowView::of(dy, c.h, c.d), RowView::columns(g1, c.c0, c.h, c.d),
                      dw1, true);
    ref.backward_rows(ExecContext::host(), x, w, r2, RowView::of(dy, c.h, c.d), RowView::columns(g2, c.c0, c.h, c.d),
                      dw2, true);
    EXPECT_TRUE(close(g1, g2, 1e-5, 1e-5));
    EXPECT_TRUE(close(dw1, dw2, 1e-4, 1e-5));
  }
}

TEST(RMSNormRows, RejectsViewsThatDoNotFit) {
  const auto& k = kernel<RMSNormKernel>("cpu");
  Tensor buf = randn({4, 10}, 1), w = randn({4}, 2), rstd = Tensor::empty({8}, DType::F32);
  Tensor y = Tensor::empty({4, 2, 4}, DType::F32);
  EXPECT_THROW(RowView::columns(buf, 4, 2, 4), Error);                   // columns 4..12 of 10
  RowView bad{buf, 4, 2, 4, 12};                                          // rows 12 apart in a 40-element buffer
  EXPECT_THROW(k.forward_rows(ExecContext::host(), bad, w, 1e-6f, RowView::of(y, 2, 4), rstd), Error);
  Tensor w5 = randn({5}, 3);
  EXPECT_THROW(
      k.forward_rows(ExecContext::host(), RowView::columns(buf, 0, 2, 4), w5, 1e-6f, RowView::of(y, 2, 4), rstd),
      Error);
  Tensor i64 = Tensor::zeros({4, 2, 4}, DType::I64);
  EXPECT_THROW(
      k.forward_rows(ExecContext::host(), RowView::columns(buf, 0, 2, 4), w, 1e-6f, RowView::of(i64, 2, 4), rstd),
      Error);
}

TEST(RopeRows, StridedViewsFromAStartPositionMatchTheReference) {
  const auto& ref = kernel<RopeKernel>("reference");
  struct Case {
    int64_t b, s, h, d, ld, c0, start;
  };
  for (const Case& c : {Case{1, 1, 1, 2, 5, 1, 0}, Case{2, 7, 3, 16, 80, 16, 5}, Case{3, 33, 2, 10, 23, 3, 31}}) {
    const RopeCache cache = make_rope_cache(1e6, c.d, c.start + c.s);
    // Positions start.. through `start` equal positions 0.. of the cache's rows from `start`.
    RopeCache shifted{cache.cos.slice0(c.start, c.start + c.s), cache.sin.slice0(c.start, c.start + c.s)};
    const Tensor buf = randn({c.b * c.s, c.ld}, uint64_t(c.s + c.d), 2.0);
    const ViewCase vc{c.b * c.s, c.h, c.d, c.ld, c.c0};
    for (bool fwd : {true, false}) {
      Tensor want = gather(RowView::columns(buf, c.c0, c.h, c.d)).view({c.b, c.s, c.h, c.d});
      if (fwd)
        ref.forward(ExecContext::host(), want, shifted);
      else
        ref.backward(ExecContext::host(), want, shifted);
      for (const char* variant : {"reference", "cpu", "transposed"}) {
        const auto& k = kernel<RopeKernel>(variant);
        Tensor b = buf.clone();
        const RowView v = RowView::columns(b, c.c0, c.h, c.d);
        if (fwd)
          k.forward_rows(ExecContext::host(), v, c.s, c.start, cache);
        else
          k.backward_rows(ExecContext::host(), v, c.s, c.start, cache);
        const Tensor got = gather(v);
        // reference and fused compute each element the same way; cpu in f32 arithmetic
        if (std::string(variant) == "cpu") EXPECT_TRUE(close(got, want, 1e-6, 1e-6)) << variant << " fwd " << fwd;
        else EXPECT_TRUE(bitwise_equal(got, want)) << variant << " fwd " << fwd;
        EXPECT_TRUE(outside_untouched(b, buf, vc)) << variant;
      }
    }
  }
  Tensor x = randn({1, 4, 1, 8}, 1);
  const RopeCache small = make_rope_cache(1e6, 8, 5);
  EXPECT_THROW(ref.forward_rows(ExecContext::host(), RowView::of(x, 1, 8), 4, 2, small), Error);  // positions 2..5 of 5
  EXPECT_THROW(ref.forward_rows(ExecContext::host(), RowView::of(x, 1, 8), 3, 0, small),
               Error);  // 4 rows, sequences of 3
}

TEST(SwiGLUBf16Output, IsTheRoundingOfTheF32Output) {
  for (const char* variant : {"reference", "cpu"}) {
    const auto& k = kernel<SwiGLUKernel>(variant);
    for (const auto& [N, I] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {17, 33}, {5, 1000}}) {
      const Tensor gu = randn({N, 2 * I}, uint64_t(N + I), 3.0), dy = randn({N, I}, uint64_t(N * I));
      Tensor y = Tensor::empty({N, I}, DType::F32), yb = Tensor::empty({N, I}, DType::BF16);
      k.forward(ExecContext::host(), gu, y);
      k.forward(ExecContext::host(), gu, yb);
      EXPECT_TRUE(bitwise_equal(as_f32(yb), as_f32(to_bf16(y)))) << variant << " " << N << "x" << I;
      Tensor d = Tensor::empty({N, 2 * I}, DType::F32), db = Tensor::empty({N, 2 * I}, DType::BF16);
      k.backward(ExecContext::host(), gu, dy, d);
      k.backward(ExecContext::host(), gu, dy, db);
      EXPECT_TRUE(bitwise_equal(as_f32(db), as_f32(to_bf16(d)))) << variant << " " << N << "x" << I;
    }
    Tensor gu = randn({2, 8}, 1), dy = randn({2, 4}, 2), i32 = Tensor::zeros({2, 8}, DType::I32);
    EXPECT_THROW(k.backward(ExecContext::host(), gu, dy, i32), Error);
  }
}
