// What the kernel case table (src/ops/verify/, tests/unit/ops/test_kernel_cases.cpp) does not
// cover for the cpu kernels: outputs aliasing inputs, argument errors, and the AVX2 and AVX-512
// SwiGLU rows giving the same bits. The comparisons against the references (odd shapes, 1 vs 2
// threads bitwise) are cases of the table.
#include <vector>

#include "ops/embedding/embedding.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/swiglu/swiglu.h"
#include "ops/swiglu/swiglu_rows.h"
#include "op_test_util.h"

using namespace titan;
using namespace titan::optest;

TEST(CpuKernels, OutOfRangeIdsAndMismatchedShapesAreErrors) {
  const auto& emb = kernel<EmbeddingKernel>("cpu");
  Tensor w = randn({4, 3}, 1), out = Tensor::empty({1, 3}, DType::F32);
  Tensor bad = Tensor::empty({1}, DType::I64);
  bad.data<int64_t>()[0] = 4;
  EXPECT_THROW(emb.forward(ExecContext::host(), bad, w, out), Error);
  EXPECT_THROW(emb.backward(ExecContext::host(), bad, out, w), Error);
  Tensor a = randn({4}, 1), b = randn({5}, 2);
  EXPECT_THROW(kernel<ResidualKernel>("cpu").accumulate(ExecContext::host(), a, b), Error);
}

TEST(OpsInPlace, AliasedOutputsMatchOutOfPlaceCalls) {
  for (const char* v : {"reference", "cpu"}) {
    const auto& rn = kernel<RMSNormKernel>(v);
    Tensor x = randn({5, 37}, 1), w = randn({37}, 2, 0.1, 1.0), dy = randn({5, 37}, 3);
    Tensor y = Tensor::empty({5, 37}, DType::F32), rstd = Tensor::empty({5}, DType::F32);
    rn.forward(ExecContext::host(), x, w, 1e-6f, y, rstd);
    Tensor xi = x.clone(), rstd_i = Tensor::empty({5}, DType::F32);
    rn.forward(ExecContext::host(), xi, w, 1e-6f, xi, rstd_i);  // y aliasing x
    EXPECT_TRUE(bitwise_equal(xi, y)) << v;
    Tensor dx = Tensor::empty({5, 37}, DType::F32), dw = Tensor::zeros({37}, DType::F32);
    rn.backward(ExecContext::host(), x, w, rstd, dy, dx, dw);
    Tensor dyi = dy.clone(), dwi = Tensor::zeros({37}, DType::F32);
    rn.backward(ExecContext::host(), x, w, rstd, dyi, dyi, dwi);  // dx aliasing dy
    EXPECT_TRUE(bitwise_equal(dyi, dx) && bitwise_equal(dwi, dw)) << v;

    const auto& sg = kernel<SwiGLUKernel>(v);
    Tensor gu = randn({3, 22}, 4), dout = randn({3, 11}, 5), dgu = Tensor::empty({3, 22}, DType::F32);
    sg.backward(ExecContext::host(), gu, dout, dgu);
    Tensor gui = gu.clone();
    sg.backward(ExecContext::host(), gui, dout, gui);  // dgu aliasing gu
    EXPECT_TRUE(bitwise_equal(gui, dgu)) << v;

    const auto& res = kernel<ResidualKernel>(v);
    Tensor a = randn({1000}, 6), b = randn({1000}, 7), sum = Tensor::empty({1000}, DType::F32);
    res.forward(ExecContext::host(), a, b, sum);
    Tensor ai = a.clone();
    res.forward(ExecContext::host(), ai, b, ai);  // y aliasing a
    EXPECT_TRUE(bitwise_equal(ai, sum)) << v;
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
