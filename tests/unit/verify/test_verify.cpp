// verify_kernels: rows for every non-reference variant, the documented fields, bit-exact rows for
// the transposed-layout RoPE, and a failing row for a deliberately wrong kernel (registered only in this test).
#include <gtest/gtest.h>

#include <cmath>

#include "ops/swiglu/swiglu.h"
#include "ops/verify/verify.h"

// FdCheck is written with designated initializers; the fields left out keep their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

using namespace titan;

namespace {

// SwiGLU that forgets the up projection in forward: a wrong kernel verify must catch.
void wrong_forward(const ExecContext&, const Tensor& gu, Tensor& out) {
  const int64_t N = gu.dim(0), I = gu.dim(1) / 2;
  Tensor y = Tensor::empty({N, I}, DType::F32);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < I; ++j) {
      const float g = gu.data<float>()[n * 2 * I + j];
      y.data<float>()[n * I + j] = g / (1.f + std::exp(-g));
    }
  out.copy_(y);  // f32 or the bf16 output form
}
void right_backward(const ExecContext& ctx, const Tensor& gu, const Tensor& dout, Tensor& dgu) {
  kernel<SwiGLUKernel>("reference").backward(ctx, gu, dout, dgu);
}
const SwiGLUKernel kWrong{"test_wrong", wrong_forward, right_backward};
TITAN_REGISTER_KERNEL(SwiGLUKernel, "test_wrong", DeviceType::CPU, kWrong);

TEST(VerifyKernels, WrongKernelFailsItsForwardRowsOnly) {
  const auto rows = verify_kernels("swiglu");
  int wrong_fwd = 0, wrong_bwd = 0, cpu_fwd = 0, cpu_bwd = 0;
  for (const auto& r : rows) {
    EXPECT_EQ(r.op, "swiglu");
    if (r.variant == "cpu") (r.direction == "forward" ? cpu_fwd : cpu_bwd) += 1;
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
  // Every case of the table runs for every variant: 3 shapes x {f32, bf16, bf16 with a bf16
  // output} and 16 thread-independence shapes.
  EXPECT_EQ(wrong_fwd, 3 * 3 + 16);
  EXPECT_EQ(wrong_fwd, cpu_fwd);
  EXPECT_EQ(wrong_bwd, cpu_bwd);
}

TEST(VerifyKernels, TransposedRopeRowsAreExactAndEveryOpWithVariantsHasRows) {
  const auto rows = verify_kernels();
  int rope_exact = 0, moe = 0, gradient = 0;
  for (const auto& r : rows) {
    if (r.variant == "reference") {  // only the finite-difference rows of the reference backward
      EXPECT_EQ(r.direction, "gradient");
      EXPECT_EQ(r.dtype, "f32");
      ++gradient;
    }
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
  // ((shapes x {q, k} + row views) x dtypes + 5 thread-independence shapes + 5 x 2 thetas) x directions
  EXPECT_EQ(rope_exact, ((4 * 2 + 2) * 2 + 5 + 5 * 2) * 2);
  EXPECT_EQ(moe, 6 * 2 * 2);  // 6 shapes (2 with an expert bias and dlogits_extra) x dtypes x directions
  // embedding 3, linear 8 (4 of them decode-GEMV shapes), rmsnorm 4, rope 8, attention 5
  // (block-causal too), swiglu 3, cross_entropy 4, moe 6, bias 4, gated_delta 8 (block-causal
  // too), causal_conv1d 7 (block-causal too), gated_rmsnorm 4
  EXPECT_EQ(gradient, 64);
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

namespace {

// The finite-difference row on a function with a known gradient: L(x) = sum sin(x_i) r_i. The
// right gradient passes; one 1% off, or one with a wrong sign in one entry, fails.
TEST(VerifyFiniteDifferences, RightGradientPassesAndWrongOnesFail) {
  using namespace verify_detail;
  auto row = [](double scale, int64_t flip) {
    KernelCase c;
    c.op = "test", c.shape = "n=6", c.fd = true;
    c.variants = [] { return std::vector<std::string>{}; };
    c.make = [=] {
      const Tensor x = randn({6}, 1), r = randn({6}, 2);
      CaseBody b;
      b.fd = FdCheck{.inputs = {x},
                     .loss = [=] {
                       double s = 0;
                       for (int64_t i = 0; i < 6; ++i) s += std::sin(double(x.data<float>()[i])) * r.data<float>()[i];
                       return s;
                     },
                     .grads = [=] {
                       Tensor g = Tensor::empty({6}, DType::F32);
                       for (int64_t i = 0; i < 6; ++i)
                         g.data<float>()[i] = float(scale * (i == flip ? -1 : 1) * std::cos(double(x.data<float>()[i])) *
                                                    r.data<float>()[i]);
                       return std::vector<Tensor>{g};
                     }};
      return b;
    };
    const auto rows = run_case(c, "reference");
    EXPECT_EQ(rows.size(), 1u);
    EXPECT_TRUE(run_case(c, "cpu").empty());  // no comparisons in this case
    return rows.at(0);
  };
  const VerifyRow ok = row(1.0, -1);
  EXPECT_TRUE(ok.ok) << ok.max_rel_diff << " " << ok.why;
  EXPECT_EQ(ok.direction, "gradient");
  EXPECT_LT(ok.max_rel_diff, 1e-4);
  EXPECT_FALSE(row(1.01, -1).ok);
  EXPECT_FALSE(row(1.0, 3).ok);
}

}  // namespace
