// verify_kernels: rows for every non-reference variant, the documented fields, bit-exact rows for
// the transposed-layout RoPE, and a failing row for a deliberately wrong kernel (registered only in this test).
#include <gtest/gtest.h>

#include <cmath>

#include "ops/swiglu/swiglu.h"
#include "ops/verify/verify.h"

using namespace titan;

namespace {

// SwiGLU that forgets the up projection in forward: a wrong kernel verify must catch.
void wrong_forward(const Tensor& gu, Tensor& out) {
  const int64_t N = gu.dim(0), I = gu.dim(1) / 2;
  Tensor y = Tensor::empty({N, I}, DType::F32);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < I; ++j) {
      const float g = gu.data<float>()[n * 2 * I + j];
      y.data<float>()[n * I + j] = g / (1.f + std::exp(-g));
    }
  out.copy_(y);  // f32 or the bf16 output form
}
void right_backward(const Tensor& gu, const Tensor& dout, Tensor& dgu) {
  kernel<SwiGLUKernel>("reference").backward(gu, dout, dgu);
}
const SwiGLUKernel kWrong{"test_wrong", wrong_forward, right_backward};
TITAN_REGISTER_KERNEL(SwiGLUKernel, "test_wrong", DeviceType::CPU, kWrong);

TEST(VerifyKernels, WrongKernelFailsItsForwardRowsOnly) {
  const auto rows = verify_kernels("swiglu");
  int wrong_fwd = 0, wrong_bwd = 0;
  for (const auto& r : rows) {
    EXPECT_EQ(r.op, "swiglu");
    if (r.variant != "test_wrong") continue;
    if (r.direction == "forward") {
      ++wrong_fwd;
      EXPECT_FALSE(r.ok) << r.shape << " " << r.dtype;
      EXPECT_GT(r.max_abs_diff, 0.0);
    } else {
      ++wrong_bwd;
      EXPECT_TRUE(r.ok) << r.shape << " " << r.dtype;
    }
  }
  EXPECT_EQ(wrong_fwd, 9);  // 3 shapes x {f32, bf16, bf16 with a bf16 output}
  EXPECT_EQ(wrong_bwd, 9);
}

TEST(VerifyKernels, TransposedRopeRowsAreExactAndEveryOpWithVariantsHasRows) {
  const auto rows = verify_kernels();
  int rope_exact = 0, moe = 0;
  for (const auto& r : rows) {
    EXPECT_NE(r.variant, "reference");
    if (r.variant == "test_wrong") continue;
    EXPECT_TRUE(r.ok) << r.op << "." << r.variant << " " << r.dtype << " " << r.shape << " " << r.direction;
    if (r.op == "rope" && r.variant == "transposed") {
      EXPECT_TRUE(r.exact);
      EXPECT_EQ(r.max_abs_diff, 0.0);
      ++rope_exact;
    }
    if (r.op == "moe" && r.variant == "grouped_gemm") {
      EXPECT_TRUE(r.dtype == "f32" || r.dtype == "bf16");
      ++moe;
    }
  }
  EXPECT_EQ(rope_exact, (4 * 2 + 2) * 2 * 2);  // (shapes x {q, k} + row views) x dtypes x directions
  EXPECT_EQ(moe, 4 * 2 * 2);
  EXPECT_THROW(verify_kernels("nosuch"), Error);
}

}  // namespace

namespace {

TEST(VerifyDiff, RelativeToLargestReferenceWithAFloor) {
  using verify_detail::Diff;
  Tensor ref = Tensor::empty({3}, DType::F32), got = Tensor::empty({3}, DType::F32);
  const float r[3] = {2.f, -4.f, 0.f}, g[3] = {2.f, -4.004f, 0.f};
  std::copy(r, r + 3, ref.data<float>());
  std::copy(g, g + 3, got.data<float>());
  Diff d;
  d.add(got, ref);
  EXPECT_NEAR(d.max_rel, 1e-3, 1e-6);  // 0.004 / 4
  // An output that is zero up to rounding (e.g. RMSNorm's dx for D = 1) is judged against the floor.
  const float r2[3] = {1e-10f, -2e-10f, 0.f}, g2[3] = {3e-10f, 0.f, 1e-10f};
  std::copy(r2, r2 + 3, ref.data<float>());
  std::copy(g2, g2 + 3, got.data<float>());
  Diff z;
  z.add(got, ref);
  EXPECT_LT(z.max_rel, 1e-6);
  EXPECT_GT(z.max_abs, 0.0);
  Diff n;
  n.add_scalar(NAN, 1.0);
  EXPECT_FALSE(n.finite);
}

}  // namespace
