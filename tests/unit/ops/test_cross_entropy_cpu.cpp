// The chunked cpu cross-entropy against the reference. The chunk logic is driven through
// ce_detail::cpu_* with a plain double-accumulating GEMM defined here (deterministic, so thread
// counts and chunk sizes can be compared bitwise where the math allows); the registered kernel,
// which uses the "cpu" GEMM, is compared too once that GEMM is registered.
#include <cmath>
#include <vector>

#include "ops/cross_entropy/cpu_impl.h"
#include "ops/cross_entropy/softmax_rows.h"
#include "op_test_util.h"

using namespace titan;
using namespace titan::optest;

namespace {

float in_at(const void* p, DType dt, int64_t i) {
  return dt == DType::BF16 ? bf16_to_f32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

// C = alpha op(A) op(B) + beta C with double sums in k order (beta = 0 never reads C).
void plain_gemm(const ExecContext&, const GemmArgs& g) {
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t j = 0; j < g.n; ++j) {
      double s = 0;
      for (int64_t k = 0; k < g.k; ++k) {
        const double a = in_at(g.a, g.in_dtype, g.trans_a ? k * g.lda + i : i * g.lda + k);
        const double b = in_at(g.b, g.in_dtype, g.trans_b ? j * g.ldb + k : k * g.ldb + j);
        s += a * b;
      }
      float& c = g.c[i * g.ldc + j];
      c = float(double(g.alpha) * s + (g.beta == 0.f ? 0.0 : double(g.beta) * c));
    }
}
const GemmKernel kPlainGemm{"test-plain", plain_gemm};

Tensor random_labels(int64_t n, int64_t V, uint64_t seed, bool with_ignored) {
  Tensor u = uniform({n}, seed, 0.0, double(V));
  Tensor t = Tensor::empty({n}, DType::I64);
  for (int64_t i = 0; i < n; ++i) {
    int64_t l = std::min<int64_t>(V - 1, int64_t(u.data<float>()[i]));
    if (with_ignored && i % 4 == 1) l = kIgnoreIndex;
    t.data<int64_t>()[i] = l;
  }
  return t;
}

// max|a - b| <= tol * max(1, max|b|): for bf16-level comparisons of whole tensors.
::testing::AssertionResult close_to_scale(const Tensor& a, const Tensor& b, double tol) {
  double scale = 1;
  for (int64_t i = 0; i < b.numel(); ++i) scale = std::max(scale, double(std::fabs(b.data<float>()[i])));
  return close(a, b, tol * scale, 0);
}

struct Shape3 {
  int64_t n, h, v;
};
const Shape3 kShapes[] = {{1, 1, 1}, {1, 7, 5}, {3, 33, 100}, {17, 7, 1000}, {129, 33, 37}, {20, 16, 4099}};

}  // namespace

TEST(CrossEntropyCpu, MatchesReferenceForwardAndBackward) {
  const auto& ref = kernel<CrossEntropyKernel>("reference");
  for (const Shape3& s : kShapes)
    for (int64_t rows : {int64_t(0), int64_t(1), int64_t(5)}) {
      Tensor h = randn({s.n, s.h}, uint64_t(s.n * 7 + s.v), 1.5), w = randn({s.v, s.h}, uint64_t(s.h + s.v), 0.5);
      Tensor labels = random_labels(s.n, s.v, uint64_t(s.n + s.v), s.n > 2);
      const float scale = 1.0f / float(std::max<int64_t>(1, count_labels(labels)));
      Tensor dhr = Tensor::empty({s.n, s.h}, DType::F32), dwr = randn({s.v, s.h}, 77, 0.1);
      Tensor dhc = dhr.clone(), dwc = dwr.clone();
      const double lr = ref.forward_backward(ExecContext::host(), h, w, labels, scale, dhr, dwr, DType::F32);
      const double lc = ce_detail::cpu_forward_backward(ExecContext::host(), kPlainGemm, h, w, labels, scale, dhc, dwc,
                                                        DType::F32, rows);
      const std::string what = std::to_string(s.n) + "x" + std::to_string(s.h) + "x" + std::to_string(s.v) +
                               " rows " + std::to_string(rows);
      EXPECT_NEAR(lc, lr, 1e-5 * (1 + std::fabs(lr))) << what;
      EXPECT_TRUE(close(dhc, dhr, 1e-6, 1e-5)) << what;
      EXPECT_TRUE(close(dwc, dwr, 1e-6, 1e-5)) << what;
      const double lf =
          ce_detail::cpu_forward(ExecContext::host(), kPlainGemm, h, w, labels, nullptr, DType::F32, rows);
      EXPECT_NEAR(lf, lr, 1e-5 * (1 + std::fabs(lr))) << what;
      Tensor logits_r = Tensor::empty({s.n, s.v}, DType::F32), logits_c = logits_r.clone();
      ref.forward(ExecContext::host(), h, w, labels, &logits_r, DType::F32);
      EXPECT_NEAR(ce_detail::cpu_forward(ExecContext::host(), kPlainGemm, h, w, labels, &logits_c, DType::F32, rows),
                  lr, 1e-5 * (1 + std::fabs(lr)));
      EXPECT_TRUE(close(logits_c, logits_r, 1e-6, 1e-6)) << what;
    }
}

TEST(CrossEntropyCpu, ChunkSizeAndThreadCountDoNotChangeLossOrDh) {
  const int64_t N = 37, H = 19, V = 2053;
  Tensor h = randn({N, H}, 1), w = randn({V, H}, 2, 0.3);
  Tensor labels = random_labels(N, V, 3, true);
  Tensor dh_a = Tensor::empty({N, H}, DType::F32), dw_a = Tensor::zeros({V, H}, DType::F32);
  double loss_a = 0;
  with_threads(1, [&] {
    loss_a =
        ce_detail::cpu_forward_backward(ExecContext::host(), kPlainGemm, h, w, labels, 0.5f, dh_a, dw_a, DType::F32, 8);
  });
  for (int threads : {1, 2})
    for (int64_t rows : {int64_t(8), int64_t(1), int64_t(0)}) {
      Tensor dh = Tensor::empty({N, H}, DType::F32), dw = Tensor::zeros({V, H}, DType::F32);
      double loss = 0;
      with_threads(threads, [&] {
        loss = ce_detail::cpu_forward_backward(ExecContext::host(), kPlainGemm, h, w, labels, 0.5f, dh, dw, DType::F32,
                                               rows);
      });
      // Row losses and dh rows depend only on their row; dW's per-chunk sums follow the chunking.
      EXPECT_EQ(loss, loss_a) << threads << " threads, rows " << rows;
      EXPECT_TRUE(bitwise_equal(dh, dh_a)) << threads << " threads, rows " << rows;
      if (rows == 8) EXPECT_TRUE(bitwise_equal(dw, dw_a)) << threads << " threads";
      else EXPECT_TRUE(close(dw, dw_a, 1e-6, 1e-5));
    }
}

TEST(CrossEntropyCpu, Bf16ComputeMatchesReferenceOnTheSameInputs) {
  const auto& ref = kernel<CrossEntropyKernel>("reference");
  for (const Shape3& s : kShapes) {
    Tensor h = randn({s.n, s.h}, uint64_t(s.n + 3), 1.5), w = randn({s.v, s.h}, uint64_t(s.v + 4), 0.5);
    Tensor labels = random_labels(s.n, s.v, uint64_t(s.h), s.n > 2);
    Tensor dhr = Tensor::empty({s.n, s.h}, DType::F32), dwr = Tensor::zeros({s.v, s.h}, DType::F32);
    Tensor dhc = dhr.clone(), dwc = dwr.clone();
    const double lr = ref.forward_backward(ExecContext::host(), h, w, labels, 0.25f, dhr, dwr, DType::BF16);
    const double lc =
        ce_detail::cpu_forward_backward(ExecContext::host(), kPlainGemm, h, w, labels, 0.25f, dhc, dwc, DType::BF16, 4);
    EXPECT_NEAR(lc, lr, 1e-5 * (1 + std::fabs(lr)));
    // dlogits are rounded to bf16 from f32 here and from double in the reference: at most one bf16
    // step apart where the two straddle a rounding boundary.
    EXPECT_TRUE(close_to_scale(dhc, dhr, 1e-2)) << s.n << "x" << s.h << "x" << s.v;
    EXPECT_TRUE(close_to_scale(dwc, dwr, 1e-2)) << s.n << "x" << s.h << "x" << s.v;
    Tensor lgr = Tensor::empty({s.n, s.v}, DType::F32), lgc = lgr.clone();
    ref.forward(ExecContext::host(), h, w, labels, &lgr, DType::BF16);
    ce_detail::cpu_forward(ExecContext::host(), kPlainGemm, h, w, labels, &lgc, DType::BF16);
    EXPECT_TRUE(close(lgc, lgr, 1e-6, 1e-6));
  }
}

// A bf16 W (a frozen bf16 lm_head) with bf16 compute is read as it is: bit-equal to the f32 W of
// the same (bf16-representable) values, which the bf16 call rounds to exactly those; both kernels.
// A bf16 W needs bf16 compute and no dW.
TEST(CrossEntropyCpu, Bf16WeightEqualsItsF32ValuesWithBf16Compute) {
  for (const char* variant : {"reference", "cpu"}) {
    const auto& k = kernel<CrossEntropyKernel>(variant);
    for (const Shape3& s : kShapes) {
      Tensor h = randn({s.n, s.h}, uint64_t(s.n + 5), 1.5);
      Tensor wb = randn({s.v, s.h}, uint64_t(s.v + 6), 0.5).to(DType::BF16), wf = wb.to(DType::F32);
      Tensor labels = random_labels(s.n, s.v, uint64_t(s.h + 1), s.n > 2);
      Tensor dhb = Tensor::empty({s.n, s.h}, DType::F32), dhf = dhb.clone(), none;
      EXPECT_EQ(k.forward_backward(ExecContext::host(), h, wb, labels, 0.5f, dhb, none, DType::BF16),
                k.forward_backward(ExecContext::host(), h, wf, labels, 0.5f, dhf, none, DType::BF16));
      EXPECT_TRUE(close(dhb, dhf, 0, 0)) << variant << " " << s.n << "x" << s.h << "x" << s.v;
      Tensor lb = Tensor::empty({s.n, s.v}, DType::F32), lf = lb.clone();
      k.forward(ExecContext::host(), h, wb, labels, &lb, DType::BF16);
      k.forward(ExecContext::host(), h, wf, labels, &lf, DType::BF16);
      EXPECT_TRUE(close(lb, lf, 0, 0)) << variant;
      EXPECT_THROW(k.forward(ExecContext::host(), h, wb, labels, nullptr, DType::F32), Error);
      Tensor dw = Tensor::zeros({s.v, s.h}, DType::F32);
      EXPECT_THROW(k.forward_backward(ExecContext::host(), h, wb, labels, 0.5f, dhb, dw, DType::BF16), Error);
    }
  }
}

TEST(CrossEntropyCpu, IgnoredRowsAndErrors) {
  const int64_t N = 6, H = 5, V = 11;
  Tensor h = randn({N, H}, 5), w = randn({V, H}, 6);
  Tensor all_ignored = Tensor::empty({N}, DType::I32);
  for (int64_t i = 0; i < N; ++i) all_ignored.data<int32_t>()[i] = -100;
  Tensor dh = Tensor::empty({N, H}, DType::F32), dw = Tensor::zeros({V, H}, DType::F32);
  dh.fill_(3.f);
  for (DType c : {DType::F32, DType::BF16}) {
    EXPECT_EQ(ce_detail::cpu_forward_backward(ExecContext::host(), kPlainGemm, h, w, all_ignored, 1.f, dh, dw, c, 2),
              0.0);
    EXPECT_EQ(ce_detail::cpu_forward(ExecContext::host(), kPlainGemm, h, w, all_ignored, nullptr, c, 2), 0.0);
    for (int64_t i = 0; i < dh.numel(); ++i) ASSERT_EQ(dh.data<float>()[i], 0.f);
    for (int64_t i = 0; i < dw.numel(); ++i) ASSERT_EQ(dw.data<float>()[i], 0.f);
  }
  Tensor bad = random_labels(N, V, 7, false);
  bad.data<int64_t>()[3] = V;
  EXPECT_THROW(ce_detail::cpu_forward_backward(ExecContext::host(), kPlainGemm, h, w, bad, 1.f, dh, dw, DType::F32),
               Error);
  EXPECT_THROW(ce_detail::cpu_forward(ExecContext::host(), kPlainGemm, h, w, bad, nullptr, DType::F32), Error);
  for (int64_t i = 0; i < dw.numel(); ++i) ASSERT_EQ(dw.data<float>()[i], 0.f);
  Tensor wrong_dw = Tensor::zeros({V, H + 1}, DType::F32);
  EXPECT_THROW(ce_detail::cpu_forward_backward(ExecContext::host(), kPlainGemm, h, w, random_labels(N, V, 8, false),
                                               1.f, dh, wrong_dw, DType::F32),
               Error);
}

TEST(CrossEntropyCpu, ChunkRowsFitTheBudget) {
  using ce_detail::chunk_rows;
  EXPECT_EQ(chunk_rows(100, 10), 100);  // one chunk
  EXPECT_EQ(chunk_rows(0, 10), 1);
  // 2048 rows of 151936 logits with 512 MiB: at most 883 rows, so 3 equal chunks of 683 -> 688.
  EXPECT_EQ(chunk_rows(2048, 151936), 688);
  for (int64_t n : {int64_t(1000), int64_t(4097), int64_t(100000)}) {
    const int64_t r = chunk_rows(n, 151936, size_t(64) << 20);
    EXPECT_LE(size_t(r) * 151936 * 4, size_t(64) << 20) << n;
    EXPECT_GE(r * ((n + r - 1) / r), n);
  }
}

TEST(CrossEntropyCpu, RowPassesMatchDoubleMath) {
  std::vector<const ce_detail::RowOps*> impls{&ce_detail::row_ops_avx2()};
  if (ce_detail::row_ops_avx512() && __builtin_cpu_supports("avx512f")) impls.push_back(ce_detail::row_ops_avx512());
  for (const ce_detail::RowOps* ops : impls)
    for (int64_t V : {1, 7, 8, 9, 31, 33, 64, 65, 1000, 4099}) {
      Tensor z = randn({V}, uint64_t(V), 4.0);
      const float* zp = z.data<float>();
      float mx = zp[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, zp[v]);
      ASSERT_EQ(ops->max(zp, V), mx) << V;
      double s = 0;
      for (int64_t v = 0; v < V; ++v) s += std::exp(double(zp[v]) - mx);
      EXPECT_NEAR(ops->sum_exp(zp, V, mx), s, 2e-6 * s) << V;
      Tensor e = z.clone();
      EXPECT_EQ(ops->exp_store(e.data<float>(), V, mx), ops->sum_exp(zp, V, mx)) << V;
      for (int64_t v = 0; v < V; ++v) {  // e^(z - m) with z - m rounded to f32, then 1.1 ulp of exp
        const double want = std::exp(double(zp[v] - mx));
        ASSERT_NEAR(e.data<float>()[v], want, 1.5e-7 * want) << V;
      }
      std::vector<uint16_t> b(static_cast<size_t>(V));
      Tensor sc = z.clone(), kept = z.clone();
      ops->scale(sc.data<float>(), V, 0.37f, nullptr);
      ops->scale(kept.data<float>(), V, 0.37f, b.data());  // bf16 only: the f32 row is left as is
      for (int64_t v = 0; v < V; ++v) {
        ASSERT_EQ(sc.data<float>()[v], zp[v] * 0.37f);
        ASSERT_EQ(b[size_t(v)], f32_to_bf16(zp[v] * 0.37f));
        ASSERT_EQ(kept.data<float>()[v], zp[v]);
      }
    }
}

TEST(CrossEntropyCpu, RegisteredKernelMatchesReference) {
  if (!KernelRegistry<GemmKernel>::get().find("cpu")) GTEST_SKIP() << "no gemm.cpu registered in this build";
  const auto& ref = kernel<CrossEntropyKernel>("reference");
  const auto& cpu = kernel<CrossEntropyKernel>("cpu");
  for (const Shape3& s : kShapes)
    for (DType c : {DType::F32, DType::BF16}) {
      Tensor h = randn({s.n, s.h}, uint64_t(s.n), 1.5), w = randn({s.v, s.h}, uint64_t(s.v), 0.5);
      Tensor labels = random_labels(s.n, s.v, uint64_t(s.h), s.n > 2);
      Tensor dhr = Tensor::empty({s.n, s.h}, DType::F32), dwr = Tensor::zeros({s.v, s.h}, DType::F32);
      Tensor dhc = dhr.clone(), dwc = dwr.clone();
      const double lr = ref.forward_backward(ExecContext::host(), h, w, labels, 0.5f, dhr, dwr, c);
      const double lc = cpu.forward_backward(ExecContext::host(), h, w, labels, 0.5f, dhc, dwc, c);
      const double tol = c == DType::F32 ? 1e-4 : 1e-2;
      EXPECT_NEAR(lc, lr, 1e-4 * (1 + std::fabs(lr)));
      EXPECT_TRUE(close_to_scale(dhc, dhr, tol)) << s.n << "x" << s.h << "x" << s.v;
      EXPECT_TRUE(close_to_scale(dwc, dwr, tol)) << s.n << "x" << s.h << "x" << s.v;
      EXPECT_NEAR(cpu.forward(ExecContext::host(), h, w, labels, nullptr, c), lr, 1e-4 * (1 + std::fabs(lr)));
    }
}

TEST(CrossEntropyCpu, AcceptsBatchedHiddenStates) {
  // h [B, S, H] with labels [B, S] is the same computation as h [B*S, H] with labels [B*S].
  const auto& ref = kernel<CrossEntropyKernel>("reference");
  Tensor h = randn({2, 3, 5}, 1), w = randn({7, 5}, 2);
  Tensor labels = random_labels(6, 7, 3, true).view({2, 3});
  for (DType c : {DType::F32, DType::BF16}) {
    Tensor dh3 = Tensor::empty({2, 3, 5}, DType::F32), dw3 = Tensor::zeros({7, 5}, DType::F32);
    Tensor dh2 = Tensor::empty({6, 5}, DType::F32), dw2 = Tensor::zeros({7, 5}, DType::F32);
    const double a =
        ce_detail::cpu_forward_backward(ExecContext::host(), kPlainGemm, h, w, labels, 0.5f, dh3, dw3, c, 4);
    const double b = ce_detail::cpu_forward_backward(ExecContext::host(), kPlainGemm, h.view({6, 5}), w,
                                                     labels.view({6}), 0.5f, dh2, dw2, c, 4);
    EXPECT_EQ(a, b);
    EXPECT_TRUE(bitwise_equal(dh3, dh2) && bitwise_equal(dw3, dw2));
    Tensor dhr = Tensor::empty({2, 3, 5}, DType::F32), dwr = Tensor::zeros({7, 5}, DType::F32);
    EXPECT_NEAR(ref.forward_backward(ExecContext::host(), h, w, labels, 0.5f, dhr, dwr, c), a, 1e-5);
    EXPECT_TRUE(close_to_scale(dhr, dh3, c == DType::F32 ? 1e-5 : 1e-2));
  }
}

TEST(CrossEntropyCpu, RegisteredKernelIsThreadCountIndependent) {
  // With gemm.cpu: the whole fused kernel, GEMMs included, gives the same bits on 1 and 2 threads
  // (core/threading.h's promise, which the trainer's reproducibility rests on).
  if (!KernelRegistry<GemmKernel>::get().find("cpu")) GTEST_SKIP() << "no gemm.cpu registered in this build";
  const auto& cpu = kernel<CrossEntropyKernel>("cpu");
  const int64_t N = 300, H = 96, V = 5003;
  Tensor h = randn({N, H}, 1), w = randn({V, H}, 2, 0.1);
  Tensor labels = random_labels(N, V, 4, true);
  for (DType c : {DType::F32, DType::BF16}) {
    Tensor dh1 = Tensor::empty({N, H}, DType::F32), dw1 = Tensor::zeros({V, H}, DType::F32);
    Tensor dh2 = dh1.clone(), dw2 = dw1.clone();
    double l1 = 0, l2 = 0;
    with_threads(1, [&] { l1 = cpu.forward_backward(ExecContext::host(), h, w, labels, 0.01f, dh1, dw1, c); });
    with_threads(2, [&] { l2 = cpu.forward_backward(ExecContext::host(), h, w, labels, 0.01f, dh2, dw2, c); });
    EXPECT_EQ(l1, l2) << dtype_name(c);
    EXPECT_TRUE(bitwise_equal(dh1, dh2) && bitwise_equal(dw1, dw2)) << dtype_name(c);
  }
}
