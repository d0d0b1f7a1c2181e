// The single-source kernels through their pointer-level entry points (ops/cuda/launch.h) against
// plain loops, with no tensors: this file is also compiled into the ASan+UBSan binary with the
// emulator (test_core_cuda_emu_asan, cmake/cuda.cmake), so every kernel's indexing runs under the
// sanitizers there (a shared or device array overrun is a heap-buffer-overflow).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/cuda_emu/cuda.h"
#include "ops/cuda/launch.h"

namespace {

namespace ck = titan::cuda_kernels;
using Vec = std::vector<float>;

Vec random_vec(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Vec v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// A device copy of a host vector, copied back by get().
struct Dev {
  size_t n;
  float* p;
  explicit Dev(const Vec& h) : n(h.size()), p(static_cast<float*>(titan::gpu::alloc(h.size() * sizeof(float)))) {
    titan::gpu::copy_to_device(p, h.data(), n * sizeof(float));
  }
  ~Dev() { titan::gpu::free(p); }
  Vec get() const {
    Vec h(n);
    titan::gpu::copy_to_host(h.data(), p, n * sizeof(float));
    return h;
  }
};

TEST(CudaKernelsRaw, RmsnormForwardAndBackwardOnStridedRows) {
  // 6 rows of 2 heads of d = 37, rows 80 apart (ld > h d: a view into a wider buffer).
  const int64_t rows = 6, h = 2, d = 37, ld = 80, n = rows * h;
  const ck::Rows r{h, d, ld};
  const Vec x = random_vec(size_t(rows * ld), 1), w = random_vec(size_t(d), 2), dy = random_vec(size_t(rows * ld), 3);
  Dev dx_(x), dw_(w), dy_(dy), y_(Vec(size_t(rows * ld), 0.0f)), rstd_(Vec(size_t(n), 0.0f));
  ck::rmsnorm_forward(dx_.p, r, dw_.p, 1e-6f, y_.p, nullptr, r, rstd_.p, n, nullptr);
  Dev grad_(Vec(size_t(rows * ld), 0.0f)), dwg_(Vec(size_t(d), 0.5f));
  Dev partial_(Vec(size_t(ck::rmsnorm_dw_partial_floats(n, d)), 0.0f));
  ck::rmsnorm_backward(dx_.p, r, dw_.p, rstd_.p, dy_.p, r, grad_.p, r, dwg_.p, partial_.p, n, false, nullptr);
  const Vec y = y_.get(), rstd = rstd_.get(), g = grad_.get(), dwg = dwg_.get();
  std::vector<double> dw_want(size_t(d), 0.5);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t off = (i / h) * ld + (i % h) * d;
    double ss = 0, dot = 0;
    for (int64_t j = 0; j < d; ++j) ss += double(x[size_t(off + j)]) * x[size_t(off + j)];
    const double rs = 1.0 / std::sqrt(ss / double(d) + 1e-6);
    EXPECT_NEAR(rstd[size_t(i)], rs, 1e-5 * rs);
    for (int64_t j = 0; j < d; ++j) {
      EXPECT_NEAR(y[size_t(off + j)], w[size_t(j)] * x[size_t(off + j)] * rs, 1e-5);
      dot += double(w[size_t(j)]) * dy[size_t(off + j)] * x[size_t(off + j)] * rs;
      dw_want[size_t(j)] += double(dy[size_t(off + j)]) * x[size_t(off + j)] * rs;
    }
    for (int64_t j = 0; j < d; ++j) {
      const double xh = x[size_t(off + j)] * rs;
      EXPECT_NEAR(g[size_t(off + j)], rs * (w[size_t(j)] * dy[size_t(off + j)] - xh * dot / double(d)), 1e-4);
    }
  }
  for (int64_t j = 0; j < d; ++j) EXPECT_NEAR(dwg[size_t(j)], dw_want[size_t(j)], 1e-4);
  // The gaps between the rows' vectors are left alone.
  for (int64_t q = h * d; q < ld; ++q) EXPECT_EQ(y[size_t(q)], 0.0f);
}

TEST(CudaKernelsRaw, SwigluRopeAdamwEmbedding) {
  const int64_t n = 5, i = 9;
  const Vec gu = random_vec(size_t(n * 2 * i), 4);
  Dev gu_(gu), out_(Vec(size_t(n * i), 0.0f));
  ck::swiglu_forward(gu_.p, out_.p, nullptr, n, i, nullptr);
  const Vec out = out_.get();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < i; ++j) {
      const double g = gu[size_t(r * 2 * i + j)], u = gu[size_t(r * 2 * i + i + j)];
      EXPECT_NEAR(out[size_t(r * i + j)], g / (1 + std::exp(-g)) * u, 1e-5);
    }
  // RoPE forward then backward is the identity (an orthogonal rotation and its transpose).
  const int64_t rows = 4, heads = 3, d = 8, seq = 2;
  Vec cs(size_t(10 * d)), sn(size_t(10 * d));
  for (int64_t p = 0; p < 10; ++p)
    for (int64_t j = 0; j < d; ++j) {
      cs[size_t(p * d + j)] = float(std::cos(0.3 * double(p) * double(j % (d / 2) + 1)));
      sn[size_t(p * d + j)] = float(std::sin(0.3 * double(p) * double(j % (d / 2) + 1)));
    }
  const Vec x = random_vec(size_t(rows * heads * d), 5);
  Dev x_(x), cs_(cs), sn_(sn);
  const ck::Rows r{heads, d, heads * d};
  ck::rope_rotate(x_.p, r, rows, seq, 3, cs_.p, sn_.p, false, nullptr);
  const Vec rotated = x_.get();
  EXPECT_NE(rotated, x);
  ck::rope_rotate(x_.p, r, rows, seq, 3, cs_.p, sn_.p, true, nullptr);
  const Vec back = x_.get();
  for (size_t k = 0; k < x.size(); ++k) EXPECT_NEAR(back[k], x[k], 1e-5) << k;
  // AdamW, one step from zero moments: p -= lr * g / (|g| + eps) after decay (bias-corrected).
  const Vec p = random_vec(300, 6), g = random_vec(300, 7);
  Dev p_(p), g_(g), m_(Vec(300, 0.0f)), v_(Vec(300, 0.0f));
  const float lr = 0.01f, wd = 0.1f;
  ck::adamw_step(p_.p, g_.p, m_.p, v_.p, 300, 0.9f, 0.999f, 1e-8f, 1 - lr * wd, lr / (1 - 0.9f),
                 float(1 / std::sqrt(1 - 0.999)), nullptr);
  const Vec p1 = p_.get();
  for (size_t k = 0; k < p.size(); ++k)
    EXPECT_NEAR(p1[k], p[k] * (1 - lr * wd) - lr * g[k] / (std::fabs(g[k]) + 1e-8f), 1e-5) << k;
  // Embedding: gather rows, then scatter-add them back (id 2 twice).
  const std::vector<int64_t> ids = {2, 0, 2};
  const Vec w = random_vec(3 * 4, 8);
  auto* ids_d = static_cast<int64_t*>(titan::gpu::alloc(ids.size() * sizeof(int64_t)));
  titan::gpu::copy_to_device(ids_d, ids.data(), ids.size() * sizeof(int64_t));
  Dev w_(w), e_(Vec(12, 0.0f)), gw_(Vec(12, 0.0f));
  ck::embedding_forward(ids_d, nullptr, w_.p, e_.p, 3, 4, nullptr);
  ck::embedding_backward(ids_d, nullptr, e_.p, gw_.p, 3, 4, nullptr);
  titan::gpu::free(ids_d);
  const Vec e = e_.get(), gw = gw_.get();
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(e[size_t(t * 4 + c)], w[size_t(ids[size_t(t)] * 4 + c)]);
  for (int64_t c = 0; c < 4; ++c) {
    EXPECT_FLOAT_EQ(gw[size_t(2 * 4 + c)], 2 * w[size_t(2 * 4 + c)]);
    EXPECT_EQ(gw[size_t(1 * 4 + c)], 0.0f);
  }
}

}  // namespace
