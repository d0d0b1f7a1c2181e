// The fused RoPE kernel against the reference: bit-identical forward and backward (the same f32
// operations in the same order), odd shapes, thread independence, and its argument errors.
#include <gtest/gtest.h>

#include <cstring>

#include "core/threading.h"
#include "moe_test_util.h"
#include "ops/rope/rope.h"

using namespace titan;
using namespace titan::moetest;

namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

struct Shape4 {
  int64_t B, S, H, D;
};

TEST(RopeFused, BitIdenticalToReferenceForwardAndBackward) {
  const RopeKernel& ref = kernel<RopeKernel>("reference");
  const RopeKernel& fused = kernel<RopeKernel>("fused");
  const Shape4 shapes[] = {{1, 1, 1, 2}, {2, 7, 3, 16}, {1, 33, 5, 10}, {3, 5, 2, 128}, {2, 70, 4, 64}};
  uint64_t seed = 1;
  for (const Shape4& s : shapes)
    for (double theta : {10000.0, 1000000.0}) {
      const RopeCache cache = make_rope_cache(theta, s.D, s.S + 3);
      const Tensor x = randn({s.B, s.S, s.H, s.D}, seed++, 3.0);
      Tensor a = x.clone(), b = x.clone();
      ref.forward(a, cache);
      fused.forward(b, cache);
      EXPECT_TRUE(bitwise_equal(a, b)) << "forward B" << s.B << " S" << s.S << " H" << s.H << " D" << s.D;
      ref.backward(a, cache);
      fused.backward(b, cache);
      EXPECT_TRUE(bitwise_equal(a, b)) << "backward";
      // The backward undoes the forward (a rotation), up to rounding.
      EXPECT_LT(rel_err(b, x), 1e-6);
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

TEST(RopeFused, BitwiseIndependentOfThreadCount) {
  const RopeCache cache = make_rope_cache(10000.0, 32, 40);
  const Tensor x = randn({2, 40, 6, 32}, 4);
  const int before = num_threads();
  Tensor a = x.clone(), b = x.clone();
  set_num_threads(1);
  kernel<RopeKernel>("fused").forward(a, cache);
  set_num_threads(2);
  kernel<RopeKernel>("fused").forward(b, cache);
  set_num_threads(before);
  EXPECT_TRUE(bitwise_equal(a, b));
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
