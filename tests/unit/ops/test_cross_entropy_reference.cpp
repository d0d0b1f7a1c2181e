#include <cmath>
#include <string>

#include "ops/cross_entropy/cross_entropy.h"
#include "op_test_util.h"

using namespace titan;
using namespace titan::optest;

TEST(CrossEntropyReference, LossMatchesHandComputation) {
  const auto& k = kernel<CrossEntropyKernel>("reference");
  // h = [[1, 2], [0.5, -1]], W = [[1, 0], [0, 1], [1, 1]] -> logits [[1, 2, 3], [0.5, -1, -0.5]]
  Tensor h = Tensor::empty({2, 2}, DType::F32), w = Tensor::empty({3, 2}, DType::F32);
  const float hv[] = {1, 2, 0.5f, -1}, wv[] = {1, 0, 0, 1, 1, 1};
  for (int i = 0; i < 4; ++i) h.data<float>()[i] = hv[i];
  for (int i = 0; i < 6; ++i) w.data<float>()[i] = wv[i];
  for (DType dt : {DType::I32, DType::I64}) {
    Tensor labels = ids_of({2, 0}, dt);
    const double l0 = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0;
    const double l1 = std::log(std::exp(0.5) + std::exp(-1.0) + std::exp(-0.5)) - 0.5;
    Tensor logits = Tensor::empty({2, 3}, DType::F32);
    EXPECT_NEAR(k.forward(ExecContext::host(), h, w, labels, &logits, DType::F32), l0 + l1, 1e-12);
    const float expect[] = {1, 2, 3, 0.5f, -1, -0.5f};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(logits.data<float>()[i], expect[i]);
    EXPECT_NEAR(k.forward(ExecContext::host(), h, w, ids_of({-100, 0}, dt), nullptr, DType::F32), l1, 1e-12);
  }
}

TEST(CrossEntropyReference, BackwardMatchesFiniteDifferences) {
  const auto& k = kernel<CrossEntropyKernel>("reference");
  const int64_t N = 4, H = 3, V = 5;
  Tensor h = randn({N, H}, 1), w = randn({V, H}, 2);
  Tensor labels = ids_of({4, -100, 0, 2});
  const float scale = 1.0f / float(count_labels(labels));
  EXPECT_EQ(count_labels(labels), 3);
  Tensor dh = Tensor::empty({N, H}, DType::F32), dw = Tensor::zeros({V, H}, DType::F32);
  const double loss = k.forward_backward(ExecContext::host(), h, w, labels, scale, dh, dw, DType::F32);
  EXPECT_NEAR(loss, k.forward(ExecContext::host(), h, w, labels, nullptr, DType::F32), 1e-12);
  auto f = [&] { return scale * k.forward(ExecContext::host(), h, w, labels, nullptr, DType::F32); };
  EXPECT_TRUE(fd_check(h, dh, f, 1e-3, 1e-4));
  EXPECT_TRUE(fd_check(w, dw, f, 1e-3, 1e-4));
  for (int64_t j = 0; j < H; ++j) EXPECT_EQ(dh.data<float>()[1 * H + j], 0.f);  // ignored row
  // dw accumulates, dh is overwritten.
  Tensor dw2 = dw.clone(), dh2 = Tensor::empty({N, H}, DType::F32);
  dh2.fill_(7.f);
  k.forward_backward(ExecContext::host(), h, w, labels, scale, dh2, dw2, DType::F32);
  EXPECT_TRUE(bitwise_equal(dh2, dh));
  for (int64_t i = 0; i < dw.numel(); ++i) EXPECT_NEAR(dw2.data<float>()[i], 2 * dw.data<float>()[i], 1e-6);
}

TEST(CrossEntropyReference, AllRowsIgnoredGivesZeroLossAndGradients) {
  const auto& k = kernel<CrossEntropyKernel>("reference");
  Tensor h = randn({3, 4}, 3), w = randn({6, 4}, 4);
  Tensor labels = ids_of({-100, -100, -100}, DType::I32);
  EXPECT_EQ(count_labels(labels), 0);
  Tensor dh = Tensor::empty({3, 4}, DType::F32), dw = Tensor::zeros({6, 4}, DType::F32);
  dh.fill_(1.f);
  EXPECT_EQ(k.forward_backward(ExecContext::host(), h, w, labels, 1.0f, dh, dw, DType::F32), 0.0);
  EXPECT_EQ(k.forward(ExecContext::host(), h, w, labels, nullptr, DType::F32), 0.0);
  for (int64_t i = 0; i < dh.numel(); ++i) EXPECT_EQ(dh.data<float>()[i], 0.f);
  for (int64_t i = 0; i < dw.numel(); ++i) EXPECT_EQ(dw.data<float>()[i], 0.f);
}

TEST(CrossEntropyReference, LabelOutOfRangeIsAnErrorAndWritesNothing) {
  const auto& k = kernel<CrossEntropyKernel>("reference");
  Tensor h = randn({2, 4}, 5), w = randn({6, 4}, 6);
  for (int64_t bad : {int64_t(6), int64_t(-1), int64_t(-99)}) {
    Tensor labels = ids_of({1, bad});
    Tensor dh = Tensor::zeros({2, 4}, DType::F32), dw = Tensor::zeros({6, 4}, DType::F32);
    EXPECT_THROW(k.forward(ExecContext::host(), h, w, labels, nullptr, DType::F32), Error);
    EXPECT_THROW(k.forward_backward(ExecContext::host(), h, w, labels, 1.0f, dh, dw, DType::F32), Error);
    for (int64_t i = 0; i < dw.numel(); ++i) ASSERT_EQ(dw.data<float>()[i], 0.f);
  }
  try {
    k.forward(ExecContext::host(), h, w, ids_of({1, 6}), nullptr, DType::F32);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("label 6 at row 1"), std::string::npos) << e.what();
  }
  Tensor labels = ids_of({1, 2});
  EXPECT_THROW(k.forward(ExecContext::host(), h, w, labels, nullptr, DType::F16), Error);
  Tensor wrong_w = randn({6, 3}, 7);
  EXPECT_THROW(k.forward(ExecContext::host(), h, wrong_w, labels, nullptr, DType::F32), Error);
  Tensor wrong_logits = Tensor::empty({2, 5}, DType::F32);
  EXPECT_THROW(k.forward(ExecContext::host(), h, w, labels, &wrong_logits, DType::F32), Error);
}

TEST(CrossEntropyReference, Bf16ComputeRoundsTheProductInputs) {
  const auto& k = kernel<CrossEntropyKernel>("reference");
  Tensor h = randn({5, 7}, 8), w = randn({9, 7}, 9);
  Tensor labels = ids_of({0, 8, -100, 3, 3});
  Tensor hb = bf16_rounded(h), wb = bf16_rounded(w);
  Tensor l1 = Tensor::empty({5, 9}, DType::F32), l2 = Tensor::empty({5, 9}, DType::F32);
  const double a = k.forward(ExecContext::host(), h, w, labels, &l1, DType::BF16);
  const double b = k.forward(ExecContext::host(), hb, wb, labels, &l2, DType::F32);
  EXPECT_EQ(a, b);
  EXPECT_TRUE(bitwise_equal(l1, l2));
  EXPECT_NE(a, k.forward(ExecContext::host(), h, w, labels, nullptr, DType::F32));
}
