#include <cmath>

#include "ops/residual/residual.h"
#include "ops/swiglu/swiglu.h"
#include "op_test_util.h"

using namespace titan;
using namespace titan::optest;

TEST(SwiGLUReference, ForwardMatchesHandComputation) {
  const auto& k = kernel<SwiGLUKernel>("reference");
  Tensor gu = Tensor::empty({1, 4}, DType::F32);  // gate (1, -2), up (3, 0.5)
  const float vals[] = {1.f, -2.f, 3.f, 0.5f};
  for (int i = 0; i < 4; ++i) gu.data<float>()[i] = vals[i];
  Tensor out = Tensor::empty({1, 2}, DType::F32);
  k.forward(ExecContext::host(), gu, out);
  EXPECT_NEAR(out.data<float>()[0], 1.0 / (1 + std::exp(-1.0)) * 3, 1e-6);
  EXPECT_NEAR(out.data<float>()[1], -2.0 / (1 + std::exp(2.0)) * 0.5, 1e-6);
}

TEST(SwiGLUReference, BackwardMatchesFiniteDifferences) {
  const auto& k = kernel<SwiGLUKernel>("reference");
  for (int64_t I : {1, 3, 7}) {
    Tensor gu = randn({4, 2 * I}, 40 + uint64_t(I), 2.0), r = randn({4, I}, 50 + uint64_t(I));
    Tensor dgu = Tensor::empty({4, 2 * I}, DType::F32);
    k.backward(ExecContext::host(), gu, r, dgu);
    EXPECT_TRUE(fd_check(
        gu, dgu,
        [&] {
          Tensor o = Tensor::empty({4, I}, DType::F32);
          k.forward(ExecContext::host(), gu, o);
          return dot(o, r);
        },
        1e-3, 1e-3))
        << "I=" << I;
  }
}

TEST(SwiGLUReference, ShapeErrors) {
  const auto& k = kernel<SwiGLUKernel>("reference");
  Tensor odd = randn({2, 5}, 1), gu = randn({2, 6}, 1);
  Tensor out = Tensor::empty({2, 2}, DType::F32), out3 = Tensor::empty({2, 3}, DType::F32);
  EXPECT_THROW(k.forward(ExecContext::host(), odd, out), Error);
  EXPECT_THROW(k.forward(ExecContext::host(), gu, out), Error);
  Tensor dgu = Tensor::empty({2, 5}, DType::F32);
  EXPECT_THROW(k.backward(ExecContext::host(), gu, out3, dgu), Error);
}

TEST(ResidualReference, AddsAndAccumulates) {
  const auto& k = kernel<ResidualKernel>("reference");
  Tensor a = randn({3, 5}, 1), b = randn({3, 5}, 2);
  Tensor y = Tensor::empty({3, 5}, DType::F32);
  k.forward(ExecContext::host(), a, b, y);
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(y.data<float>()[i], a.data<float>()[i] + b.data<float>()[i]);
  Tensor acc = a.clone();
  k.forward(ExecContext::host(), acc, b, acc);  // y aliasing a
  EXPECT_TRUE(bitwise_equal(acc, y));
  k.accumulate(ExecContext::host(), acc, b);
  for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(acc.data<float>()[i], y.data<float>()[i] + b.data<float>()[i]);
  Tensor small = randn({4}, 3);
  EXPECT_THROW(k.accumulate(ExecContext::host(), acc, small), Error);
}
