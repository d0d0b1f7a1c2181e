#include <cmath>

#include "ops/adamw/adamw.h"
#include "op_test_util.h"

using namespace titan;
using namespace titan::optest;

namespace {

// Hyperparameters as a recipe spells them (and torch receives them, as Python floats).
struct Hp {
  double lr, beta1, beta2, eps, wd;
  AdamWParams f32(int64_t step) const {
    AdamWParams p;
    p.lr = float(lr), p.beta1 = float(beta1), p.beta2 = float(beta2), p.eps = float(eps), p.weight_decay = float(wd);
    p.step = step;
    return p;
  }
};

// One element of torch.optim.AdamW worked by hand, in double.
struct Hand {
  double p, m, v;
};
Hand adamw_by_hand(Hand s, double g, const Hp& hp, int64_t t) {
  s.p *= 1 - hp.lr * hp.wd;
  s.m = hp.beta1 * s.m + (1 - hp.beta1) * g;
  s.v = hp.beta2 * s.v + (1 - hp.beta2) * g * g;
  const double bc1 = 1 - std::pow(hp.beta1, double(t));
  const double bc2 = 1 - std::pow(hp.beta2, double(t));
  s.p -= hp.lr / bc1 * s.m / (std::sqrt(s.v) / std::sqrt(bc2) + hp.eps);
  return s;
}

}  // namespace

TEST(AdamWReference, FirstStepMatchesHandComputation) {
  // p = 1, g = 0.5, lr = 0.1, wd = 0.01: p -> 0.999; m = 0.05, v = 0.00025; bias-corrected
  // m_hat = 0.5, sqrt(v_hat) = 0.5, so the step is lr * 0.5 / (0.5 + eps) ~= 0.1 -> p ~= 0.899.
  const auto& k = kernel<AdamWKernel>("reference");
  Tensor p = Tensor::empty({1}, DType::F32), g = Tensor::empty({1}, DType::F32);
  Tensor m = Tensor::zeros({1}, DType::F32), v = Tensor::zeros({1}, DType::F32);
  p.fill_(1.f);
  g.fill_(0.5f);
  AdamWParams hp;
  hp.lr = 0.1f;
  k.step(ExecContext::host(), p, g, m, v, hp);
  EXPECT_NEAR(p.data<float>()[0], 0.899, 1e-7);
  EXPECT_EQ(m.data<float>()[0], 0.05f);
  EXPECT_EQ(v.data<float>()[0], 0.00025f);
}

TEST(AdamWReference, SeveralStepsMatchHandComputation) {
  const auto& k = kernel<AdamWKernel>("reference");
  Tensor p = randn({13}, 1), m = Tensor::zeros({13}, DType::F32), v = Tensor::zeros({13}, DType::F32);
  std::vector<Hand> hand(13);
  for (int i = 0; i < 13; ++i) hand[size_t(i)] = {p.data<float>()[i], 0, 0};
  const Hp hp{3e-3, 0.9, 0.95, 1e-8, 0.1};
  for (int64_t t = 1; t <= 5; ++t) {
    Tensor g = randn({13}, 100 + uint64_t(t));
    k.step(ExecContext::host(), p, g, m, v, hp.f32(t));
    for (int i = 0; i < 13; ++i) hand[size_t(i)] = adamw_by_hand(hand[size_t(i)], g.data<float>()[i], hp, t);
  }
  for (int i = 0; i < 13; ++i) {
    EXPECT_NEAR(p.data<float>()[i], hand[size_t(i)].p, 1e-6 * (1 + std::fabs(hand[size_t(i)].p)));
    EXPECT_NEAR(m.data<float>()[i], hand[size_t(i)].m, 1e-7);
    EXPECT_NEAR(v.data<float>()[i], hand[size_t(i)].v, 1e-7);
  }
}

TEST(AdamWReference, ArgumentErrors) {
  const auto& k = kernel<AdamWKernel>("reference");
  Tensor p = randn({4}, 1), g = randn({4}, 2), m = Tensor::zeros({4}, DType::F32), v = Tensor::zeros({3}, DType::F32);
  AdamWParams hp;
  EXPECT_THROW(k.step(ExecContext::host(), p, g, m, v, hp), Error);
  Tensor v4 = Tensor::zeros({4}, DType::F32);
  hp.step = 0;
  EXPECT_THROW(k.step(ExecContext::host(), p, g, m, v4, hp), Error);
}
