// The cpu variants of the elementwise/normalization ops and AdamW against their references, on
// random shapes with odd sizes, forward and backward, and 1 vs 2 threads bitwise.
#include <vector>

#include "ops/adamw/adamw.h"
#include "ops/embedding/embedding.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/swiglu/swiglu.h"
#include "ops/swiglu/swiglu_rows.h"
#include "op_test_util.h"

using namespace titan;
using namespace titan::optest;

namespace {

const int64_t kRows[] = {1, 3, 17, 129};
const int64_t kCols[] = {1, 7, 33, 1000};

Tensor random_ids(int64_t n, int64_t V, uint64_t seed, DType dt) {
  Tensor u = uniform({n}, seed, 0.0, double(V));
  Tensor ids = Tensor::empty({n}, dt);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = std::min<int64_t>(V - 1, int64_t(u.data<float>()[i]));
    if (dt == DType::I32) ids.data<int32_t>()[i] = int32_t(id);
    else ids.data<int64_t>()[i] = id;
  }
  return ids;
}

}  // namespace

TEST(EmbeddingCpu, MatchesReferenceAndIsThreadCountIndependent) {
  const auto& ref = kernel<EmbeddingKernel>("reference");
  const auto& cpu = kernel<EmbeddingKernel>("cpu");
  for (int64_t N : kRows)
    for (int64_t H : kCols) {
      const int64_t V = 5 + N / 3;  // few rows, so ids repeat
      Tensor w = randn({V, H}, uint64_t(N * 100 + H));
      Tensor ids = random_ids(N, V, uint64_t(N + H), N % 2 ? DType::I32 : DType::I64);
      Tensor yr = Tensor::empty({N, H}, DType::F32), yc = Tensor::empty({N, H}, DType::F32);
      ref.forward(ids, w, yr);
      cpu.forward(ids, w, yc);
      ASSERT_TRUE(bitwise_equal(yc, yr)) << N << "x" << H;
      Tensor dy = randn({N, H}, uint64_t(N * 7 + H));
      Tensor dwr = randn({V, H}, 3), dw1 = dwr.clone(), dw2 = dwr.clone();
      ref.backward(ids, dy, dwr);
      with_threads(1, [&] { cpu.backward(ids, dy, dw1); });
      with_threads(2, [&] { cpu.backward(ids, dy, dw2); });
      EXPECT_TRUE(close(dw1, dwr, 1e-5, 1e-5)) << N << "x" << H;
      EXPECT_TRUE(bitwise_equal(dw1, dw2)) << N << "x" << H;
    }
  Tensor w = randn({4, 3}, 1), out = Tensor::empty({1, 3}, DType::F32);
  Tensor bad = random_ids(1, 4, 1, DType::I64);
  bad.data<int64_t>()[0] = 4;
  EXPECT_THROW(cpu.forward(bad, w, out), Error);
  EXPECT_THROW(cpu.backward(bad, out, w), Error);
}

TEST(RMSNormCpu, MatchesReferenceAndIsThreadCountIndependent) {
  const auto& ref = kernel<RMSNormKernel>("reference");
  const auto& cpu = kernel<RMSNormKernel>("cpu");
  for (int64_t N : kRows)
    for (int64_t D : kCols) {
      Tensor x = randn({N, D}, uint64_t(N * 1000 + D), 2.0, 0.3), w = randn({D}, uint64_t(D), 0.2, 1.0);
      Tensor dy = randn({N, D}, uint64_t(N + 5 * D));
      Tensor yr = Tensor::empty({N, D}, DType::F32), rr = Tensor::empty({N}, DType::F32);
      ref.forward(x, w, 1e-6f, yr, rr);
      Tensor y1 = Tensor::empty({N, D}, DType::F32), r1 = Tensor::empty({N}, DType::F32);
      Tensor y2 = Tensor::empty({N, D}, DType::F32), r2 = Tensor::empty({N}, DType::F32);
      with_threads(1, [&] { cpu.forward(x, w, 1e-6f, y1, r1); });
      with_threads(2, [&] { cpu.forward(x, w, 1e-6f, y2, r2); });
      EXPECT_TRUE(close(y1, yr, 1e-6, 2e-6)) << N << "x" << D;
      EXPECT_TRUE(close(r1, rr, 0, 2e-6)) << N << "x" << D;
      EXPECT_TRUE(bitwise_equal(y1, y2) && bitwise_equal(r1, r2)) << N << "x" << D;
      Tensor dxr = Tensor::empty({N, D}, DType::F32), dwr = randn({D}, 9);
      Tensor dx1 = Tensor::empty({N, D}, DType::F32), dw1 = dwr.clone();
      Tensor dx2 = Tensor::empty({N, D}, DType::F32), dw2 = dwr.clone();
      ref.backward(x, w, rr, dy, dxr, dwr);
      with_threads(1, [&] { cpu.backward(x, w, rr, dy, dx1, dw1); });
      with_threads(2, [&] { cpu.backward(x, w, rr, dy, dx2, dw2); });
      EXPECT_TRUE(close(dx1, dxr, 1e-5, 1e-5)) << N << "x" << D;
      EXPECT_TRUE(close(dw1, dwr, 1e-4, 1e-5)) << N << "x" << D;
      EXPECT_TRUE(bitwise_equal(dx1, dx2) && bitwise_equal(dw1, dw2)) << N << "x" << D;
    }
}

TEST(RopeCpu, MatchesReferenceAndIsThreadCountIndependent) {
  const auto& ref = kernel<RopeKernel>("reference");
  const auto& cpu = kernel<RopeKernel>("cpu");
  struct Case {
    int64_t b, s, h, d;
  };
  for (Case c : {Case{1, 1, 1, 2}, Case{2, 3, 3, 6}, Case{1, 17, 2, 64}, Case{3, 129, 5, 34}, Case{1, 40, 4, 128}}) {
    RopeCache cache = make_rope_cache(1e6, c.d, c.s + 3);
    Tensor x = randn({c.b, c.s, c.h, c.d}, uint64_t(c.s * 10 + c.d));
    for (bool fwd : {true, false}) {
      Tensor xr = x.clone(), x1 = x.clone(), x2 = x.clone();
      if (fwd) {
        ref.forward(xr, cache);
        with_threads(1, [&] { cpu.forward(x1, cache); });
        with_threads(2, [&] { cpu.forward(x2, cache); });
      } else {
        ref.backward(xr, cache);
        with_threads(1, [&] { cpu.backward(x1, cache); });
        with_threads(2, [&] { cpu.backward(x2, cache); });
      }
      EXPECT_TRUE(close(x1, xr, 1e-6, 1e-6)) << c.s << "x" << c.d << (fwd ? " forward" : " backward");
      EXPECT_TRUE(bitwise_equal(x1, x2));
    }
  }
}

TEST(SwiGLUCpu, MatchesReferenceAndIsThreadCountIndependent) {
  const auto& ref = kernel<SwiGLUKernel>("reference");
  const auto& cpu = kernel<SwiGLUKernel>("cpu");
  for (int64_t N : kRows)
    for (int64_t I : kCols) {
      Tensor gu = randn({N, 2 * I}, uint64_t(N * 31 + I), 3.0), dy = randn({N, I}, uint64_t(N + I));
      if (N == 129 && I == 1000) {  // the extremes of the exp range, both signs
        gu.data<float>()[0] = -120.f;
        gu.data<float>()[1] = 120.f;
        gu.data<float>()[2] = -87.4f;
      }
      Tensor yr = Tensor::empty({N, I}, DType::F32), y1 = yr.clone(), y2 = yr.clone();
      ref.forward(gu, yr);
      with_threads(1, [&] { cpu.forward(gu, y1); });
      with_threads(2, [&] { cpu.forward(gu, y2); });
      EXPECT_TRUE(close(y1, yr, 1e-6, 1e-6)) << N << "x" << I;
      EXPECT_TRUE(bitwise_equal(y1, y2));
      Tensor dr = Tensor::empty({N, 2 * I}, DType::F32), d1 = dr.clone(), d2 = dr.clone();
      ref.backward(gu, dy, dr);
      with_threads(1, [&] { cpu.backward(gu, dy, d1); });
      with_threads(2, [&] { cpu.backward(gu, dy, d2); });
      EXPECT_TRUE(close(d1, dr, 1e-6, 1e-6)) << N << "x" << I;
      EXPECT_TRUE(bitwise_equal(d1, d2));
      Tensor inplace = gu.clone();  // dgu may alias gu
      cpu.backward(inplace, dy, inplace);
      EXPECT_TRUE(bitwise_equal(inplace, d1));
    }
}

TEST(ResidualCpu, MatchesReferenceBitwise) {
  const auto& ref = kernel<ResidualKernel>("reference");
  const auto& cpu = kernel<ResidualKernel>("cpu");
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000), int64_t(100003)}) {
    Tensor a = randn({n}, uint64_t(n)), b = randn({n}, uint64_t(n + 1));
    Tensor yr = Tensor::empty({n}, DType::F32), yc = yr.clone();
    ref.forward(a, b, yr);
    cpu.forward(a, b, yc);
    EXPECT_TRUE(bitwise_equal(yc, yr));
    Tensor ar = a.clone(), ac = a.clone();
    ref.accumulate(ar, b);
    cpu.accumulate(ac, b);
    EXPECT_TRUE(bitwise_equal(ac, ar));
    cpu.forward(ac, b, ac);  // y aliasing a
    ref.forward(ar, b, ar);
    EXPECT_TRUE(bitwise_equal(ac, ar));
  }
  Tensor a = randn({4}, 1), b = randn({5}, 2);
  EXPECT_THROW(cpu.accumulate(a, b), Error);
}

TEST(AdamWCpu, MatchesReferenceAndIsThreadCountIndependent) {
  const auto& ref = kernel<AdamWKernel>("reference");
  const auto& cpu = kernel<AdamWKernel>("cpu");
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(33), int64_t(100003)}) {
    Tensor p = randn({n}, uint64_t(n)), m = Tensor::zeros({n}, DType::F32), v = Tensor::zeros({n}, DType::F32);
    Tensor pr = p.clone(), mr = m.clone(), vr = v.clone(), p2 = p.clone(), m2 = m.clone(), v2 = v.clone();
    AdamWParams hp;
    hp.lr = 1e-2f;
    hp.weight_decay = 0.1f;
    hp.beta2 = 0.95f;
    for (int64_t t = 1; t <= 4; ++t) {
      hp.step = t;
      Tensor g = randn({n}, uint64_t(100 * t + n), t == 3 ? 1e-3 : 1.0);
      ref.step(pr, g, mr, vr, hp);
      with_threads(1, [&] { cpu.step(p, g, m, v, hp); });
      with_threads(2, [&] { cpu.step(p2, g, m2, v2, hp); });
    }
    EXPECT_TRUE(close(p, pr, 1e-6, 1e-6)) << n;
    EXPECT_TRUE(close(m, mr, 1e-7, 1e-6)) << n;
    EXPECT_TRUE(close(v, vr, 1e-9, 1e-6)) << n;
    EXPECT_TRUE(bitwise_equal(p, p2) && bitwise_equal(m, m2) && bitwise_equal(v, v2)) << n;
  }
}

TEST(OpsInPlace, AliasedOutputsMatchOutOfPlaceCalls) {
  for (const char* v : {"reference", "cpu"}) {
    const auto& rn = kernel<RMSNormKernel>(v);
    Tensor x = randn({5, 37}, 1), w = randn({37}, 2, 0.1, 1.0), dy = randn({5, 37}, 3);
    Tensor y = Tensor::empty({5, 37}, DType::F32), rstd = Tensor::empty({5}, DType::F32);
    rn.forward(x, w, 1e-6f, y, rstd);
    Tensor xi = x.clone(), rstd_i = Tensor::empty({5}, DType::F32);
    rn.forward(xi, w, 1e-6f, xi, rstd_i);  // y aliasing x
    EXPECT_TRUE(bitwise_equal(xi, y)) << v;
    Tensor dx = Tensor::empty({5, 37}, DType::F32), dw = Tensor::zeros({37}, DType::F32);
    rn.backward(x, w, rstd, dy, dx, dw);
    Tensor dyi = dy.clone(), dwi = Tensor::zeros({37}, DType::F32);
    rn.backward(x, w, rstd, dyi, dyi, dwi);  // dx aliasing dy
    EXPECT_TRUE(bitwise_equal(dyi, dx) && bitwise_equal(dwi, dw)) << v;

    const auto& sg = kernel<SwiGLUKernel>(v);
    Tensor gu = randn({3, 22}, 4), dout = randn({3, 11}, 5), dgu = Tensor::empty({3, 22}, DType::F32);
    sg.backward(gu, dout, dgu);
    Tensor gui = gu.clone();
    sg.backward(gui, dout, gui);  // dgu aliasing gu
    EXPECT_TRUE(bitwise_equal(gui, dgu)) << v;
  }
}

TEST(SwiGLUCpu, Avx2AndAvx512RowsGiveTheSameBits) {
  if (!__builtin_cpu_supports("avx512f")) GTEST_SKIP() << "no AVX-512 on this CPU";
  const auto& a = swiglu_detail::rows_avx2();
  const auto& b = *swiglu_detail::rows_avx512();
  for (int64_t I : {1, 7, 8, 15, 16, 17, 33, 1000}) {
    Tensor gu = randn({2 * I}, uint64_t(I), 4.0), dy = randn({I}, uint64_t(I + 1));
    gu.data<float>()[0] = I > 1 ? -95.f : 0.5f;  // below the exp range
    const float* g = gu.data<float>();
    Tensor ya = Tensor::empty({I}, DType::F32), yb = ya.clone();
    a.forward(g, g + I, ya.data<float>(), I);
    b.forward(g, g + I, yb.data<float>(), I);
    EXPECT_TRUE(bitwise_equal(ya, yb)) << I;
    Tensor da = Tensor::empty({2 * I}, DType::F32), db = da.clone();
    a.backward(g, g + I, dy.data<float>(), da.data<float>(), da.data<float>() + I, I);
    b.backward(g, g + I, dy.data<float>(), db.data<float>(), db.data<float>() + I, I);
    EXPECT_TRUE(bitwise_equal(da, db)) << I;
  }
}
