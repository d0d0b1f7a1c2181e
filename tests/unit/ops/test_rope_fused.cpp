// The fused RoPE kernel's own properties: position 0 is the identity, backward inverts forward, and
// its argument errors. Its bit-identity with the reference (the same f32 operations in the same
// order) on odd shapes, both theta values and 1 or 2 threads is checked by the kernel case table
// (src/ops/verify/, tests/unit/ops/test_kernel_cases.cpp).
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "ops/rope/rope.h"

using namespace titan;
using namespace titan::test;

namespace {

TEST(RopeFused, BackwardUndoesForward) {
  const RopeKernel& fused = kernel<RopeKernel>("fused");
  for (double theta : {10000.0, 1000000.0}) {
    const RopeCache cache = make_rope_cache(theta, 64, 73);
    const Tensor x = randn({2, 70, 4, 64}, 5, 3.0);
    Tensor y = x.clone();
    fused.forward(y, cache);
    EXPECT_GT(rel_err(y, x), 1e-3);
    fused.backward(y, cache);  // a rotation's transpose is its inverse, up to rounding
    EXPECT_LT(rel_err(y, x), 1e-6) << theta;
  }
}

TEST(RopeFused, RotatesTheFirstPositionByZero) {
  const RopeCache cache = make_rope_cache(10000.0, 8, 4);
  Tensor x = randn({1, 4, 2, 8}, 9);
  Tensor y = x.clone();
  kernel<RopeKernel>("fused").forward(y, cache);
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(y.data<float>()[i], x.data<float>()[i]);  // position 0: cos 1, sin 0
  EXPECT_GT(rel_err(y, x), 1e-3);
}

TEST(RopeFused, RejectsBadArguments) {
  const RopeKernel& fused = kernel<RopeKernel>("fused");
  const RopeCache cache = make_rope_cache(10000.0, 8, 4);
  Tensor wrong_d = randn({1, 2, 2, 6}, 1), too_long = randn({1, 5, 2, 8}, 2), three_d = randn({2, 2, 8}, 3);
  EXPECT_THROW(fused.forward(wrong_d, cache), Error);
  EXPECT_THROW(fused.forward(too_long, cache), Error);
  EXPECT_THROW(fused.backward(three_d, cache), Error);
}

}  // namespace
