// linear: forward/backward semantics (overwrite dx, accumulate dW, null skips), the bf16 compute
// path (rounding of x, W, dy; pre-converted bf16 weights), cpu vs reference, and the reference
// backward against the analytic formulas and finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>

#include "core/error.h"
#include "ops/matmul/bf16_convert.h"
#include "ops/matmul/matmul.h"

using namespace titan;

namespace {

Tensor rand_tensor(const Shape& s, uint32_t seed, float scale = 1.f) {
  Tensor t = Tensor::empty(s, DType::F32);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

Tensor bf16_rounded_f32(const Tensor& t) { return to_bf16(t).to(DType::F32); }

// max |a - b| / (max |b| + tiny)
double max_rel(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double d = 0, m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    d = std::max(d, std::fabs(double(a.data<float>()[i]) - b.data<float>()[i]));
    m = std::max(m, std::fabs(double(b.data<float>()[i])));
  }
  return d / (m + 1e-30);
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

const LinearKernel& ref_k() { return kernel<LinearKernel>("reference"); }
const LinearKernel& cpu_k() { return kernel<LinearKernel>("cpu"); }

struct Case {
  Shape x;  // [..., K]
  int64_t n;
};
const Case kCases[] = {{{1, 1}, 1}, {{3, 17}, 33}, {{2, 5, 33}, 17}, {{257, 3}, 5}, {{2, 64, 96}, 130}};

}  // namespace

TEST(Linear, ReferenceBackwardMatchesFormulas) {
  // y = x W^T; dx[m,k] = sum_n dy[m,n] W[n,k]; dW[n,k] = dW0 + sum_m dy[m,n] x[m,k].
  const int64_t M = 7, K = 5, N = 3;
  Tensor x = rand_tensor({M, K}, 1), w = rand_tensor({N, K}, 2), dy = rand_tensor({M, N}, 3);
  Tensor y = Tensor::empty({M, N}, DType::F32), dx = rand_tensor({M, K}, 4), dw = rand_tensor({N, K}, 5);
  Tensor dw0 = dw.clone();
  ref_k().forward(ExecContext::host(), x, w, y, DType::F32);
  ref_k().backward(ExecContext::host(), x, w, dy, &dx, &dw, DType::F32);
  auto X = x.data<float>(), W = w.data<float>(), DY = dy.data<float>();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += double(X[m * K + k]) * W[n * K + k];
      EXPECT_NEAR(y.data<float>()[m * N + n], s, 1e-6);
    }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += double(DY[m * N + n]) * W[n * K + k];
      EXPECT_NEAR(dx.data<float>()[m * K + k], s, 1e-6);
    }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      double s = dw0.data<float>()[n * K + k];
      for (int64_t m = 0; m < M; ++m) s += double(DY[m * N + n]) * X[m * K + k];
      EXPECT_NEAR(dw.data<float>()[n * K + k], s, 1e-6);
    }
}

TEST(Linear, ReferenceBackwardFiniteDifferences) {
  // L = sum(y * r). y is linear in x and in W, so a central difference has no truncation error;
  // h = 0.05 keeps the f32 rounding of L (|L| ~ 10, eps 6e-8) at ~1e-5 of the derivative.
  const int64_t M = 4, K = 6, N = 5;
  Tensor x = rand_tensor({M, K}, 11), w = rand_tensor({N, K}, 12), r = rand_tensor({M, N}, 13);
  auto loss = [&](const Tensor& xx, const Tensor& ww) {
    Tensor y = Tensor::empty({M, N}, DType::F32);
    ref_k().forward(ExecContext::host(), xx, ww, y, DType::F32);
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += double(y.data<float>()[i]) * r.data<float>()[i];
    return s;
  };
  Tensor dx = Tensor::empty({M, K}, DType::F32), dw = Tensor::zeros({N, K}, DType::F32);
  ref_k().backward(ExecContext::host(), x, w, r, &dx, &dw, DType::F32);
  const float h = 0.05f;
  for (int which = 0; which < 2; ++which) {
    Tensor& p = which == 0 ? x : w;
    Tensor& g = which == 0 ? dx : dw;
    for (int64_t i = 0; i < p.numel(); ++i) {
      float keep = p.data<float>()[i];
      p.data<float>()[i] = keep + h;
      double lp = loss(x, w);
      p.data<float>()[i] = keep - h;
      double lm = loss(x, w);
      p.data<float>()[i] = keep;
      EXPECT_NEAR((lp - lm) / (2 * h), g.data<float>()[i], 2e-4) << (which ? "dW" : "dx") << "[" << i << "]";
    }
  }
}

TEST(Linear, CpuMatchesReferenceForwardBackward) {
  uint32_t seed = 100;
  for (DType compute : {DType::F32, DType::BF16})
    for (const Case& c : kCases) {
      const int64_t K = c.x.back(), N = c.n;
      Shape yshape = c.x;
      yshape.back() = N;
      Tensor x = rand_tensor(c.x, seed++), w = rand_tensor({N, K}, seed++), dy = rand_tensor(yshape, seed++);
      Tensor dw_init = rand_tensor({N, K}, seed++);
      Tensor y[2], dx[2], dw[2];
      const LinearKernel* ks[2] = {&ref_k(), &cpu_k()};
      for (int v = 0; v < 2; ++v) {
        y[v] = Tensor::empty(yshape, DType::F32);
        dx[v] = rand_tensor(c.x, 999);  // garbage: must be overwritten
        dw[v] = dw_init.clone();        // must be accumulated into
        ks[v]->forward(ExecContext::host(), x, w, y[v], compute);
        ks[v]->backward(ExecContext::host(), x, w, dy, &dx[v], &dw[v], compute);
      }
      // Same (bf16-rounded, when compute is bf16) inputs on both sides: only f32 vs double
      // accumulation differs, relative to the output scale.
      SCOPED_TRACE(std::string(dtype_name(compute)) + " x" + shape_str(c.x) + " n=" + std::to_string(N));
      EXPECT_LT(max_rel(y[1], y[0]), 1e-5);
      EXPECT_LT(max_rel(dx[1], dx[0]), 1e-5);
      EXPECT_LT(max_rel(dw[1], dw[0]), 1e-5);
    }
}

TEST(Linear, Bf16ComputeRoundsInputs) {
  // compute BF16 equals compute F32 on inputs rounded to bf16 beforehand: bit-identical in the
  // reference (same products, same double sums), and for the cpu variant too when the
  // pre-rounded inputs are passed as bf16 tensors (W once per step, as the trainer does).
  Tensor x = rand_tensor({9, 33}, 1), w = rand_tensor({17, 33}, 2), dy = rand_tensor({9, 17}, 3);
  Tensor xr = bf16_rounded_f32(x), wr = bf16_rounded_f32(w), dyr = bf16_rounded_f32(dy);
  Tensor y_bf = Tensor::empty({9, 17}, DType::F32), y_f32 = Tensor::empty({9, 17}, DType::F32);
  ref_k().forward(ExecContext::host(), x, w, y_bf, DType::BF16);
  ref_k().forward(ExecContext::host(), xr, wr, y_f32, DType::F32);
  EXPECT_TRUE(bit_equal(y_bf, y_f32));
  Tensor dx_bf = Tensor::empty({9, 33}, DType::F32), dx_f32 = Tensor::empty({9, 33}, DType::F32);
  Tensor dw_bf = Tensor::zeros({17, 33}, DType::F32), dw_f32 = Tensor::zeros({17, 33}, DType::F32);
  ref_k().backward(ExecContext::host(), x, w, dy, &dx_bf, &dw_bf, DType::BF16);
  ref_k().backward(ExecContext::host(), xr, wr, dyr, &dx_f32, &dw_f32, DType::F32);
  EXPECT_TRUE(bit_equal(dx_bf, dx_f32));
  EXPECT_TRUE(bit_equal(dw_bf, dw_f32));
  // The rounding is real: f32 compute on the original inputs differs.
  Tensor y_exact = Tensor::empty({9, 17}, DType::F32);
  ref_k().forward(ExecContext::host(), x, w, y_exact, DType::F32);
  EXPECT_FALSE(bit_equal(y_exact, y_bf));

  Tensor w16 = to_bf16(w);
  EXPECT_EQ(w16.dtype(), DType::BF16);
  for (const LinearKernel* k : {&ref_k(), &cpu_k()}) {
    Tensor y1 = Tensor::empty({9, 17}, DType::F32), y2 = Tensor::empty({9, 17}, DType::F32);
    k->forward(ExecContext::host(), x, w, y1, DType::BF16);
    k->forward(ExecContext::host(), x, w16, y2, DType::BF16);
    EXPECT_TRUE(bit_equal(y1, y2)) << k->variant;
    Tensor dx1 = Tensor::empty({9, 33}, DType::F32), dx2 = Tensor::empty({9, 33}, DType::F32);
    Tensor dw1 = Tensor::zeros({17, 33}, DType::F32), dw2 = Tensor::zeros({17, 33}, DType::F32);
    k->backward(ExecContext::host(), x, w, dy, &dx1, &dw1, DType::BF16);
    k->backward(ExecContext::host(), to_bf16(x), w16, to_bf16(dy), &dx2, &dw2, DType::BF16);
    EXPECT_TRUE(bit_equal(dx1, dx2)) << k->variant;
    EXPECT_TRUE(bit_equal(dw1, dw2)) << k->variant;
  }
}

TEST(Linear, NullGradientsAreSkippedAndDwAccumulates) {
  Tensor x = rand_tensor({6, 4}, 1), w = rand_tensor({3, 4}, 2), dy = rand_tensor({6, 3}, 3);
  for (const LinearKernel* k : {&ref_k(), &cpu_k()}) {
    Tensor dx = Tensor::empty({6, 4}, DType::F32), dx_only = Tensor::empty({6, 4}, DType::F32);
    Tensor dw1 = Tensor::zeros({3, 4}, DType::F32), dw2 = Tensor::zeros({3, 4}, DType::F32);
    k->backward(ExecContext::host(), x, w, dy, &dx, &dw1, DType::F32);
    k->backward(ExecContext::host(), x, w, dy, &dx_only, nullptr, DType::F32);
    EXPECT_TRUE(bit_equal(dx, dx_only)) << k->variant;
    k->backward(ExecContext::host(), x, w, dy, nullptr, &dw2, DType::F32);
    EXPECT_TRUE(bit_equal(dw1, dw2)) << k->variant;
    k->backward(ExecContext::host(), x, w, dy, nullptr, &dw2, DType::F32);  // second micro-batch: dW doubles
    for (int64_t i = 0; i < dw1.numel(); ++i)
      EXPECT_NEAR(dw2.data<float>()[i], 2 * dw1.data<float>()[i], 1e-6) << k->variant;
  }
}

TEST(Linear, BadInputsAreErrors) {
  Tensor x = rand_tensor({6, 4}, 1), w = rand_tensor({3, 4}, 2), y = Tensor::empty({6, 3}, DType::F32);
  for (const LinearKernel* k : {&ref_k(), &cpu_k()}) {
    Tensor wrong_k = rand_tensor({3, 5}, 2);
    EXPECT_THROW(k->forward(ExecContext::host(), x, wrong_k, y, DType::F32), Error);
    Tensor wrong_y = Tensor::empty({6, 2}, DType::F32);
    EXPECT_THROW(k->forward(ExecContext::host(), x, w, wrong_y, DType::F32), Error);
    EXPECT_THROW(k->forward(ExecContext::host(), x, to_bf16(w), y, DType::F32), Error);  // bf16 weight, f32 compute
    EXPECT_THROW(k->forward(ExecContext::host(), x, w, y, DType::F16), Error);
    Tensor dy = rand_tensor({5, 3}, 3), dw = Tensor::zeros({3, 4}, DType::F32);
    EXPECT_THROW(k->backward(ExecContext::host(), x, w, dy, nullptr, &dw, DType::F32), Error);  // row count mismatch
  }
}

// The residual input form y = x @ W^T + r (the add in the GEMM's epilogue): cpu and reference,
// f32 and bf16 compute, against the plain forward plus r; r must not be y itself.
TEST(Linear, ResidualInputIsAddedInTheSamePass) {
  for (const char* variant : {"reference", "cpu"}) {
    const LinearKernel& k = kernel<LinearKernel>(variant);
    for (DType c : {DType::F32, DType::BF16})
      for (const auto& [M, K, N] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {7, 13, 5}, {70, 48, 96}}) {
        const Tensor x = rand_tensor({M, K}, 1), w = rand_tensor({N, K}, 2), r = rand_tensor({M, N}, 3, 4.f);
        Tensor y = Tensor::empty({M, N}, DType::F32), want = Tensor::empty({M, N}, DType::F32);
        k.forward_residual(ExecContext::host(), x, w, &r, y, c);
        k.forward(ExecContext::host(), x, w, want, c);
        for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] += r.data<float>()[i];
        EXPECT_LE(max_rel(y, want), 1e-6) << variant << " " << dtype_name(c) << " " << M << "x" << K << "x" << N;
      }
    Tensor x = rand_tensor({4, 3}, 4), w = rand_tensor({5, 3}, 5), y = Tensor::empty({4, 5}, DType::F32);
    Tensor short_r = rand_tensor({4, 4}, 6);
    EXPECT_THROW(k.forward_residual(ExecContext::host(), x, w, &short_r, y, DType::F32), Error);
    EXPECT_THROW(k.forward_residual(ExecContext::host(), x, w, &y, y, DType::F32), Error);
  }
  const Tensor x = rand_tensor({33, 64}, 7), w = rand_tensor({17, 64}, 8), r = rand_tensor({33, 17}, 9);
  Tensor y1 = Tensor::empty({33, 17}, DType::F32), y2 = y1.clone();
  kernel<LinearKernel>("cpu").forward_residual(ExecContext::host(), x, w, &r, y1, DType::F32);
  kernel<LinearKernel>("reference").forward_residual(ExecContext::host(), x, w, &r, y2, DType::F32);
  EXPECT_LE(max_rel(y1, y2), 1e-6);
}
