// The transposed-layout RoPE kernel's own properties (variant "transposed", alias "fused"): position 0 is the identity, backward inverts forward, and
// its argument errors. Its bit-identity with the reference (the same f32 operations in the same
// order) on odd shapes, both theta values and 1 or 2 threads is checked by the kernel case table
// (src/ops/verify/, tests/unit/ops/test_kernel_cases.cpp).
#include <gtest/gtest.h>

#include <algorithm>

#include "common/test_util.h"
#include "ops/rope/rope.h"

using namespace titan;
using namespace titan::test;

namespace {

TEST(RopeTransposed, BackwardUndoesForward) {
  const RopeKernel& tr = kernel<RopeKernel>("transposed");
  for (double theta : {10000.0, 1000000.0}) {
    const RopeCache cache = make_rope_cache(theta, 64, 73);
    const Tensor x = randn({2, 70, 4, 64}, 5, 3.0);
    Tensor y = x.clone();
    tr.forward(ExecContext::host(), y, cache);
    EXPECT_GT(rel_err(y, x), 1e-3);
    tr.backward(ExecContext::host(), y, cache);  // a rotation's transpose is its inverse, up to rounding
    EXPECT_LT(rel_err(y, x), 1e-6) << theta;
  }
}

TEST(RopeTransposed, RotatesTheFirstPositionByZero) {
  const RopeCache cache = make_rope_cache(10000.0, 8, 4);
  Tensor x = randn({1, 4, 2, 8}, 9);
  Tensor y = x.clone();
  kernel<RopeKernel>("transposed").forward(ExecContext::host(), y, cache);
  for (int64_t i = 0; i < 16; ++i) EXPECT_EQ(y.data<float>()[i], x.data<float>()[i]);  // position 0: cos 1, sin 0
  EXPECT_GT(rel_err(y, x), 1e-3);
}

TEST(RopeTransposed, RejectsBadArguments) {
  const RopeKernel& tr = kernel<RopeKernel>("transposed");
  const RopeCache cache = make_rope_cache(10000.0, 8, 4);
  Tensor wrong_d = randn({1, 2, 2, 6}, 1), too_long = randn({1, 5, 2, 8}, 2), three_d = randn({2, 2, 8}, 3);
  EXPECT_THROW(tr.forward(ExecContext::host(), wrong_d, cache), Error);
  EXPECT_THROW(tr.forward(ExecContext::host(), too_long, cache), Error);
  EXPECT_THROW(tr.backward(ExecContext::host(), three_d, cache), Error);
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
