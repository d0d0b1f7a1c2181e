#include <cmath>

#include "ops/rmsnorm/rmsnorm.h"
#include "op_test_util.h"

using namespace titan;
using namespace titan::optest;

TEST(RMSNormReference, ForwardMatchesHandComputation) {
  const auto& k = kernel<RMSNormKernel>("reference");
  Tensor x = Tensor::empty({1, 2}, DType::F32);
  x.data<float>()[0] = 3.f;
  x.data<float>()[1] = 4.f;
  Tensor w = Tensor::empty({2}, DType::F32);
  w.data<float>()[0] = 1.f;
  w.data<float>()[1] = 0.5f;
  Tensor y = Tensor::empty({1, 2}, DType::F32), rstd = Tensor::empty({1}, DType::F32);
  k.forward(ExecContext::host(), x, w, 1e-6f, y, rstd);
  const double r = 1.0 / std::sqrt(12.5 + 1e-6);  // mean(9, 16) = 12.5
  EXPECT_NEAR(rstd.data<float>()[0], r, 1e-7);
  EXPECT_NEAR(y.data<float>()[0], 3 * r, 1e-6);
  EXPECT_NEAR(y.data<float>()[1], 0.5 * 4 * r, 1e-6);
}

TEST(RMSNormReference, BackwardMatchesFiniteDifferences) {
  const auto& k = kernel<RMSNormKernel>("reference");
  for (int64_t D : {1, 5, 8}) {
    const int64_t N = 3;
    Tensor x = randn({N, D}, 10 + uint64_t(D)), w = randn({D}, 20 + uint64_t(D), 0.5, 1.0);
    Tensor r = randn({N, D}, 30 + uint64_t(D));
    Tensor y = Tensor::empty({N, D}, DType::F32), rstd = Tensor::empty({N}, DType::F32);
    k.forward(ExecContext::host(), x, w, 1e-5f, y, rstd);
    Tensor dx = Tensor::empty({N, D}, DType::F32), dw = Tensor::zeros({D}, DType::F32);
    k.backward(ExecContext::host(), x, w, rstd, r, dx, dw);
    auto loss = [&] {
      Tensor yy = Tensor::empty({N, D}, DType::F32), rs = Tensor::empty({N}, DType::F32);
      k.forward(ExecContext::host(), x, w, 1e-5f, yy, rs);
      return dot(yy, r);
    };
    EXPECT_TRUE(fd_check(x, dx, loss, 1e-3, 2e-3)) << "D=" << D;
    EXPECT_TRUE(fd_check(w, dw, loss, 1e-3, 2e-3)) << "D=" << D;
    // dw accumulates.
    Tensor dw2 = dw.clone();
    k.backward(ExecContext::host(), x, w, rstd, r, dx, dw2);
    for (int64_t j = 0; j < D; ++j) EXPECT_NEAR(dw2.data<float>()[j], 2 * dw.data<float>()[j], 1e-5);
  }
}

TEST(RMSNormReference, ShapeErrors) {
  const auto& k = kernel<RMSNormKernel>("reference");
  Tensor x = randn({2, 4}, 1), w = randn({3}, 2);
  Tensor y = Tensor::empty({2, 4}, DType::F32), rstd = Tensor::empty({2}, DType::F32);
  EXPECT_THROW(k.forward(ExecContext::host(), x, w, 1e-6f, y, rstd), Error);  // D mismatch
  Tensor w4 = randn({4}, 3), rstd3 = Tensor::empty({3}, DType::F32);
  EXPECT_THROW(k.forward(ExecContext::host(), x, w4, 1e-6f, y, rstd3), Error);  // rstd size
}
