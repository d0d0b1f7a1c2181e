// The transposed-layout RoPE kernel against the reference: bit-identical forward and backward (the same f32
// operations in the same order), odd shapes, thread independence, and its argument errors.
#include <gtest/gtest.h>

#include <algorithm>
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

TEST(RopeTransposed, BitIdenticalToReferenceForwardAndBackward) {
  const RopeKernel& ref = kernel<RopeKernel>("reference");
  const RopeKernel& tr = kernel<RopeKernel>("transposed");
  const Shape4 shapes[] = {{1, 1, 1, 2}, {2, 7, 3, 16}, {1, 33, 5, 10}, {3, 5, 2, 128}, {2, 70, 4, 64}};
  uint64_t seed = 1;
  for (const Shape4& s : shapes)
    for (double theta : {10000.0, 1000000.0}) {
      const RopeCache cache = make_rope_cache(theta, s.D, s.S + 3);
      const Tensor x = randn({s.B, s.S, s.H, s.D}, seed++, 3.0);
      Tensor a = x.clone(), b = x.clone();
      ref.forward(a, cache);
      tr.forward(b, cache);
      EXPECT_TRUE(bitwise_equal(a, b)) << "forward B" << s.B << " S" << s.S << " H" << s.H << " D" << s.D;
      ref.backward(a, cache);
      tr.backward(b, cache);
      EXPECT_TRUE(bitwise_equal(a, b)) << "backward";
      // The backward undoes the forward (a rotation), up to rounding.
      EXPECT_LT(rel_err(b, x), 1e-6);
    }
}

TEST(RopeTransposed, RotatesTheFirstPositionByZero) {
  const RopeCache cache = make_rope_cache(10000.0, 8, 4);
  Tensor x = randn({1, 4, 2, 8}, 9);
  Tensor y = x.clone();
  kernel<RopeKernel>("transposed").forward(y, cache);
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(y.data<float>()[i], x.data<float>()[i]);  // position 0: cos 1, sin 0
  EXPECT_GT(rel_err(y, x), 1e-3);
}

TEST(RopeTransposed, BitwiseIndependentOfThreadCount) {
  const RopeCache cache = make_rope_cache(10000.0, 32, 40);
  const Tensor x = randn({2, 40, 6, 32}, 4);
  const int before = num_threads();
  Tensor a = x.clone(), b = x.clone();
  set_num_threads(1);
  kernel<RopeKernel>("transposed").forward(a, cache);
  set_num_threads(2);
  kernel<RopeKernel>("transposed").forward(b, cache);
  set_num_threads(before);
  EXPECT_TRUE(bitwise_equal(a, b));
}

TEST(RopeTransposed, RejectsBadArguments) {
  const RopeKernel& tr = kernel<RopeKernel>("transposed");
  const RopeCache cache = make_rope_cache(10000.0, 8, 4);
  Tensor wrong_d = randn({1, 2, 2, 6}, 1), too_long = randn({1, 5, 2, 8}, 2), three_d = randn({2, 2, 8}, 3);
  EXPECT_THROW(tr.forward(wrong_d, cache), Error);
  EXPECT_THROW(tr.forward(too_long, cache), Error);
  EXPECT_THROW(tr.backward(three_d, cache), Error);
}

// "fused", the variant's first name, still selects it (job files and recipes written with it),
// while the registry lists it under its own name only.
TEST(RopeTransposed, FusedIsAnAliasOfIt) {
  EXPECT_EQ(&kernel<RopeKernel>("fused"), &kernel<RopeKernel>("transposed"));
  EXPECT_STREQ(kernel<RopeKernel>("fused").variant, "transposed");
  const auto v = KernelRegistry<RopeKernel>::get().variants();
  EXPECT_NE(std::find(v.begin(), v.end(), "transposed"), v.end());
  EXPECT_EQ(std::find(v.begin(), v.end(), "fused"), v.end());
  EXPECT_EQ(KernelRegistry<RopeKernel>::get().find("fusedd"), nullptr);
}

}  // namespace
