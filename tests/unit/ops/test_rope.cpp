#include <cmath>

#include "ops/rope/rope.h"
#include "op_test_util.h"

using namespace titan;
using namespace titan::optest;

TEST(RopeCache, FollowsHFFormulaInF32) {
  RopeCache c = make_rope_cache(1e6, 8, 5);
  ASSERT_EQ(c.cos.shape(), (Shape{5, 8}));
  for (int64_t p = 0; p < 5; ++p)
    for (int64_t i = 0; i < 4; ++i) {
      // f32 exponent, pow rounded to f32, f32 reciprocal, f32 angle, cos/sin rounded to f32
      const float inv = 1.0f / float(std::pow(1e6, double(float(2 * i) / 8.0f)));
      const float f = float(p) * inv;
      EXPECT_EQ(c.cos.data<float>()[p * 8 + i], float(std::cos(double(f))));
      EXPECT_EQ(c.cos.data<float>()[p * 8 + i + 4], float(std::cos(double(f))));
      EXPECT_EQ(c.sin.data<float>()[p * 8 + i], float(std::sin(double(f))));
      EXPECT_EQ(c.sin.data<float>()[p * 8 + i + 4], float(std::sin(double(f))));
      EXPECT_NEAR(c.cos.data<float>()[p * 8 + i], std::cos(double(p) * std::pow(1e6, -double(2 * i) / 8)), 1e-6);
    }
  EXPECT_THROW(make_rope_cache(1e6, 7, 5), Error);
  EXPECT_THROW(make_rope_cache(1e6, 8, 0), Error);
}

TEST(RopeReference, RotatesHalvesAsHF) {
  const auto& k = kernel<RopeKernel>("reference");
  RopeCache c = make_rope_cache(10000, 4, 3);
  Tensor x = randn({1, 3, 2, 4}, 1);
  Tensor y = x.clone();
  k.forward(ExecContext::host(), y, c);
  for (int64_t s = 0; s < 3; ++s)
    for (int64_t h = 0; h < 2; ++h) {
      const float* xr = x.data<float>() + (s * 2 + h) * 4;
      const float* yr = y.data<float>() + (s * 2 + h) * 4;
      const float* cs = c.cos.data<float>() + s * 4;
      const float* sn = c.sin.data<float>() + s * 4;
      // y = x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1)
      const double rot[4] = {-xr[2], -xr[3], xr[0], xr[1]};
      for (int j = 0; j < 4; ++j) EXPECT_NEAR(yr[j], xr[j] * double(cs[j]) + rot[j] * double(sn[j]), 1e-6);
    }
  // Position 0 is the identity.
  for (int j = 0; j < 8; ++j) EXPECT_EQ(y.data<float>()[j], x.data<float>()[j]);
}

TEST(RopeReference, BackwardMatchesFiniteDifferencesAndInvertsForward) {
  const auto& k = kernel<RopeKernel>("reference");
  RopeCache c = make_rope_cache(100, 6, 4);
  Tensor x = randn({2, 3, 2, 6}, 2), r = randn({2, 3, 2, 6}, 3);
  Tensor dx = r.clone();
  k.backward(ExecContext::host(), dx, c);
  EXPECT_TRUE(fd_check(
      x, dx,
      [&] {
        Tensor y = x.clone();
        k.forward(ExecContext::host(), y, c);
        return dot(y, r);
      },
      1e-2, 1e-5));
  // A rotation's transpose is its inverse.
  Tensor y = x.clone();
  k.forward(ExecContext::host(), y, c);
  k.backward(ExecContext::host(), y, c);
  EXPECT_TRUE(close(y, x, 1e-6, 1e-6));
}

TEST(RopeReference, ShapeErrors) {
  const auto& k = kernel<RopeKernel>("reference");
  RopeCache c = make_rope_cache(100, 4, 2);
  Tensor too_long = randn({1, 3, 1, 4}, 1), wrong_d = randn({1, 2, 1, 6}, 1), three_d = randn({2, 1, 4}, 1);
  EXPECT_THROW(k.forward(ExecContext::host(), too_long, c), Error);
  EXPECT_THROW(k.forward(ExecContext::host(), wrong_d, c), Error);
  EXPECT_THROW(k.backward(ExecContext::host(), three_d, c), Error);
}
