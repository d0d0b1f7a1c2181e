// The single-source kernels through their pointer-level entry points (ops/cuda/launch.h) against
// plain loops, with no tensors: this file is also compiled into the ASan+UBSan binary with the
// emulator (test_core_cuda_emu_asan, cmake/cuda.cmake), so every kernel's indexing runs under the
// sanitizers there (a shared or device array overrun is a heap-buffer-overflow).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
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

// ---- the Gated DeltaNet kernels ----

using DVec = std::vector<double>;
DVec to_d(const Vec& v) { return DVec(v.begin(), v.end()); }

// The gated delta rule token by token in double (ops/gated_delta/gated_delta.h) on flat arrays;
// returns L = <out, r_out> + <fin, r_fin> and, when asked, out and fin.
struct GdShape {
  int64_t B, S, Hk, Hv, dk, dv;
  double scale;
  std::vector<int64_t> seg;  // document starts [B * S]
};
double gd_host(const GdShape& s, const DVec& q, const DVec& k, const DVec& v, const DVec& g, const DVec& beta,
               const DVec& init, const Vec& r_out, const Vec& r_fin, Vec* out, Vec* fin) {
  double loss = 0;
  const int64_t ratio = s.Hv / s.Hk;
  auto normed = [&](const DVec& x, int64_t b, int64_t t, int64_t hk, double sc) {
    DVec y(size_t(s.dk));
    double ss = 0;
    for (int64_t i = 0; i < s.dk; ++i)
      ss += x[size_t(((b * s.S + t) * s.Hk + hk) * s.dk + i)] * x[size_t(((b * s.S + t) * s.Hk + hk) * s.dk + i)];
    for (int64_t i = 0; i < s.dk; ++i)
      y[size_t(i)] = sc * x[size_t(((b * s.S + t) * s.Hk + hk) * s.dk + i)] / std::sqrt(ss + 1e-6);
    return y;
  };
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hv; ++h) {
      DVec st(size_t(s.dk * s.dv));
      for (int64_t e = 0; e < s.dk * s.dv; ++e) st[size_t(e)] = init[size_t((b * s.Hv + h) * s.dk * s.dv + e)];
      for (int64_t t = 0; t < s.S; ++t) {
        if (t > 0 && s.seg[size_t(b * s.S + t)] == t) std::fill(st.begin(), st.end(), 0.0);
        const DVec qt = normed(q, b, t, h / ratio, s.scale), kt = normed(k, b, t, h / ratio, 1.0);
        const int64_t tv = (b * s.S + t) * s.Hv + h;
        const double a = std::exp(g[size_t(tv)]);
        for (int64_t j = 0; j < s.dv; ++j) {
          double kv = 0;
          for (int64_t i = 0; i < s.dk; ++i) kv += a * st[size_t(i * s.dv + j)] * kt[size_t(i)];
          const double delta = beta[size_t(tv)] * (v[size_t(tv * s.dv + j)] - kv);
          double o = 0;
          for (int64_t i = 0; i < s.dk; ++i) {
            double& x = st[size_t(i * s.dv + j)];
            x = a * x + kt[size_t(i)] * delta;
            o += x * qt[size_t(i)];
          }
          loss += o * r_out[size_t(tv * s.dv + j)];
          if (out) (*out)[size_t(tv * s.dv + j)] = float(o);
        }
      }
      for (int64_t e = 0; e < s.dk * s.dv; ++e) {
        const size_t f = size_t((b * s.Hv + h) * s.dk * s.dv + e);
        loss += st[size_t(e)] * r_fin[f];
        if (fin) (*fin)[f] = float(st[size_t(e)]);
      }
    }
  return loss;
}

// Forward against the double recurrence; backward against a central difference of it along one
// random direction of all inputs. Two column tiles (dv = 40), a GQA group of 2, three documents in
// the row, an initial state; dk = 200 puts the backward's shared memory above 48 KiB (the launch
// opts in).
TEST(CudaKernelsRaw, GatedDeltaForwardAndBackward) {
  for (int64_t dk : {8, 200}) {
    GdShape s{1, 11, 1, 2, dk, 40, 0.4, {0, 0, 0, 3, 3, 3, 3, 3, 8, 8, 8}};
    const size_t nq = size_t(s.B * s.S * s.Hk * s.dk), nv = size_t(s.B * s.S * s.Hv * s.dv),
                 ng = size_t(s.B * s.S * s.Hv), ns = size_t(s.B * s.Hv * s.dk * s.dv);
    const Vec q = random_vec(nq, 11), k = random_vec(nq, 12), v = random_vec(nv, 13), gn = random_vec(ng, 14),
              bn = random_vec(ng, 15), init = random_vec(ns, 16), r_out = random_vec(nv, 17),
              r_fin = random_vec(ns, 18);
    Vec g(ng), beta(ng);
    for (size_t i = 0; i < ng; ++i)
      g[i] = -float(std::log1p(std::exp(double(gn[i])))), beta[i] = float(1 / (1 + std::exp(-double(bn[i]))));
    auto* seg_d = static_cast<int64_t*>(titan::gpu::alloc(s.seg.size() * sizeof(int64_t)));
    titan::gpu::copy_to_device(seg_d, s.seg.data(), s.seg.size() * sizeof(int64_t));
    Dev q_(q), k_(k), v_(v), g_(g), b_(beta), i_(init), out_(Vec(nv, 0.0f)), fin_(Vec(ns, 0.0f));
    ck::GatedDeltaArgs a;
    a.q = q_.p, a.k = k_.p, a.v = v_.p, a.g = g_.p, a.beta = b_.p, a.seg = seg_d, a.init = i_.p;
    a.B = s.B, a.S = s.S, a.Hk = s.Hk, a.Hv = s.Hv, a.dk = s.dk, a.dv = s.dv, a.scale = float(s.scale), a.l2norm = true;
    ASSERT_STREQ(ck::gated_delta_check(a), "");
    {
      Dev scratch(Vec(size_t(ck::gated_delta_forward_scratch_floats(a)), 0.0f));
      ck::gated_delta_forward(a, out_.p, fin_.p, scratch.p, nullptr);
    }
    Vec want_out(nv), want_fin(ns);
    gd_host(s, to_d(q), to_d(k), to_d(v), to_d(g), to_d(beta), to_d(init), r_out, r_fin, &want_out, &want_fin);
    const Vec out = out_.get(), fin = fin_.get();
    double big = 0;
    for (float x : want_out) big = std::max(big, double(std::fabs(x)));
    for (size_t i = 0; i < nv; ++i) EXPECT_NEAR(out[i], want_out[i], 1e-5 * big) << dk << " out " << i;
    for (size_t i = 0; i < ns; ++i)
      EXPECT_NEAR(fin[i], want_fin[i], 1e-4 * (1 + std::fabs(want_fin[i]))) << dk << " fin " << i;

    Dev ro_(r_out), rf_(r_fin), dq_(Vec(nq, 0.0f)), dk_(Vec(nq, 0.0f)), dv_(Vec(nv, 0.0f)), dg_(Vec(ng, 0.0f)),
        db_(Vec(ng, 0.0f)), di_(Vec(ns, 0.0f));
    {
      Dev scratch(Vec(size_t(ck::gated_delta_backward_scratch_floats(a)), 0.0f));
      ck::gated_delta_backward(a, ro_.p, rf_.p, dq_.p, dk_.p, dv_.p, dg_.p, db_.p, di_.p, scratch.p, nullptr);
    }
    titan::gpu::free(seg_d);
    // <grad, u> against (L(x + eps u) - L(x - eps u)) / (2 eps) in double, u normal per input.
    const std::vector<Vec> xs = {q, k, v, g, beta, init};
    const std::vector<Vec> grads = {dq_.get(), dk_.get(), dv_.get(), dg_.get(), db_.get(), di_.get()};
    std::vector<DVec> up(6), dn(6);
    double analytic = 0, norm2 = 0;
    for (size_t t = 0; t < 6; ++t) {
      const Vec u = random_vec(xs[t].size(), unsigned(30 + t));
      up[t] = to_d(xs[t]), dn[t] = to_d(xs[t]);
      for (size_t i = 0; i < u.size(); ++i) {
        up[t][i] += 1e-4 * u[i], dn[t][i] -= 1e-4 * u[i];
        analytic += double(grads[t][i]) * u[i];
        norm2 += double(grads[t][i]) * grads[t][i];
        ASSERT_TRUE(std::isfinite(grads[t][i])) << dk << " input " << t << " element " << i;
      }
    }
    const double lp = gd_host(s, up[0], up[1], up[2], up[3], up[4], up[5], r_out, r_fin, nullptr, nullptr);
    const double lm = gd_host(s, dn[0], dn[1], dn[2], dn[3], dn[4], dn[5], r_out, r_fin, nullptr, nullptr);
    EXPECT_NEAR(analytic, (lp - lm) / 2e-4, 1e-4 * std::sqrt(norm2)) << dk;
  }
}

// Gated RMSNorm and causal conv1d (with a state, two documents) against plain loops in double.
TEST(CudaKernelsRaw, GatedRmsnormAndCausalConv1d) {
  const int64_t n = 3, d = 150;  // d > 128 threads: two elements for some threads
  const Vec x = random_vec(size_t(n * d), 21), z = random_vec(size_t(n * d), 22), w = random_vec(size_t(d), 23);
  Dev x_(x), z_(z), w_(w), y_(Vec(size_t(n * d), 0.0f));
  ck::gated_rmsnorm_forward(x_.p, z_.p, w_.p, 1e-6f, y_.p, n, d, nullptr);
  const Vec y = y_.get();
  for (int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < d; ++j) ss += double(x[size_t(r * d + j)]) * x[size_t(r * d + j)];
    const double rs = 1 / std::sqrt(ss / double(d) + 1e-6);
    for (int64_t j = 0; j < d; ++j) {
      const double zz = z[size_t(r * d + j)];
      EXPECT_NEAR(y[size_t(r * d + j)], w[size_t(j)] * x[size_t(r * d + j)] * rs * zz / (1 + std::exp(-zz)), 1e-5);
    }
  }
  // dw (+=) of the backward: sum over rows of dy silu(z) x^, starting from 1.
  const Vec dy = random_vec(size_t(n * d), 24);
  Dev dy_(dy), dx_(Vec(size_t(n * d), 0.0f)), dz_(Vec(size_t(n * d), 0.0f)), dw_(Vec(size_t(d), 1.0f));
  Dev scratch(Vec(size_t(ck::gated_rmsnorm_scratch_floats(n, d)), 0.0f));
  ck::gated_rmsnorm_backward(x_.p, z_.p, w_.p, 1e-6f, dy_.p, dx_.p, dz_.p, dw_.p, scratch.p, n, d, nullptr);
  const Vec dw = dw_.get();
  for (int64_t j = 0; j < d; ++j) {
    double s = 1;
    for (int64_t r = 0; r < n; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < d; ++i) ss += double(x[size_t(r * d + i)]) * x[size_t(r * d + i)];
      const double zz = z[size_t(r * d + j)];
      s += dy[size_t(r * d + j)] * zz / (1 + std::exp(-zz)) * x[size_t(r * d + j)] / std::sqrt(ss / double(d) + 1e-6);
    }
    EXPECT_NEAR(dw[size_t(j)], s, 1e-4);
  }

  // conv1d: B = 1, S = 6, C = 3, K = 4; documents [0, 2) and [2, 6); forward and state_out.
  const int64_t S = 6, C = 3, K = 4;
  const std::vector<int64_t> seg = {0, 0, 2, 2, 2, 2};
  const Vec cx = random_vec(size_t(S * C), 25), cw = random_vec(size_t(C * K), 26),
            st = random_vec(size_t(C * (K - 1)), 27);
  auto* seg_d = static_cast<int64_t*>(titan::gpu::alloc(seg.size() * sizeof(int64_t)));
  titan::gpu::copy_to_device(seg_d, seg.data(), seg.size() * sizeof(int64_t));
  Dev cx_(cx), cw_(cw), st_(st), cy_(Vec(size_t(S * C), 0.0f)), so_(Vec(size_t(C * (K - 1)), 0.0f));
  ck::Conv1dArgs a;
  a.x = cx_.p, a.w = cw_.p, a.seg = seg_d, a.state_in = st_.p, a.B = 1, a.S = S, a.C = C, a.K = K;
  ck::causal_conv1d_forward(a, cy_.p, so_.p, nullptr);
  auto input = [&](int64_t t, int64_t c, int64_t a0) -> double {
    if (t >= a0) return cx[size_t(t * C + c)];
    return a0 == 0 && t < 0 ? st[size_t(c * (K - 1) + (K - 1 + t))] : 0.0;
  };
  const Vec cy = cy_.get(), so = so_.get();
  for (int64_t t = 0; t < S; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t j = 0; j < K; ++j) s += cw[size_t(c * K + j)] * input(t - K + 1 + j, c, seg[size_t(t)]);
      EXPECT_NEAR(cy[size_t(t * C + c)], s / (1 + std::exp(-s)), 1e-5) << t << " " << c;
    }
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < K - 1; ++j) EXPECT_EQ(so[size_t(c * (K - 1) + j)], cx[size_t((S - (K - 1) + j) * C + c)]);
  // Backward with dy = 1 at one output (t = 3, c = 1): dx is w's taps inside the document only,
  // and the state gets nothing (the second document does not see it).
  Vec dyc(size_t(S * C), 0.0f);
  dyc[size_t(3 * C + 1)] = 1.0f;
  Dev dyc_(dyc), dxc_(Vec(size_t(S * C), 0.0f)), dwc_(Vec(size_t(C * K), 0.0f)), dsc_(Vec(size_t(C * (K - 1)), 5.0f));
  Dev cscratch(Vec(size_t(ck::causal_conv1d_scratch_floats(a)), 0.0f));
  ck::causal_conv1d_backward(a, dyc_.p, dxc_.p, dwc_.p, dsc_.p, cscratch.p, nullptr);
  titan::gpu::free(seg_d);
  double pre = 0;
  for (int64_t j = 0; j < K; ++j) pre += cw[size_t(1 * K + j)] * input(3 - K + 1 + j, 1, 2);
  const double sg = 1 / (1 + std::exp(-pre)), da = sg + pre * sg * (1 - sg);
  const Vec dxc = dxc_.get(), dsc = dsc_.get();
  for (int64_t u = 0; u < S; ++u)
    for (int64_t c = 0; c < C; ++c) {
      const bool tap = c == 1 && u >= 2 && u <= 3;
      EXPECT_NEAR(dxc[size_t(u * C + c)], tap ? cw[size_t(1 * K + (u - 3 + K - 1))] * da : 0.0, 1e-5) << u << " " << c;
    }
  for (float v : dsc) EXPECT_EQ(v, 0.0f);
}

// A device copy of an int32 host vector, copied back by get().
struct DevI {
  size_t n;
  int32_t* p;
  explicit DevI(const std::vector<int32_t>& h)
      : n(h.size()), p(static_cast<int32_t*>(titan::gpu::alloc(std::max<size_t>(h.size(), 1) * sizeof(int32_t)))) {
    if (n) titan::gpu::copy_to_device(p, h.data(), n * sizeof(int32_t));
  }
  ~DevI() { titan::gpu::free(p); }
  std::vector<int32_t> get() const {
    std::vector<int32_t> h(n);
    if (n) titan::gpu::copy_to_host(h.data(), p, n * sizeof(int32_t));
    return h;
  }
};

// The MoE slot permutation against a host stable counting sort: 700 slots (several 256-slot
// chunks of the placement), 9 experts, expert 4 with no slots, the others uneven; then the
// inverse and the combine.
TEST(CudaKernelsRaw, MoePermutationIsAStableCountingSort) {
  const int64_t slots = 700, E = 9, K = 2, T = slots / K, H = 5;
  std::mt19937 gen(7);
  std::vector<int32_t> idx(static_cast<size_t>(slots));
  for (auto& e : idx) {
    e = int32_t(gen() % 8);  // 0..7, then 4 -> 8: expert 4 stays empty
    if (e == 4) e = 8;
    if (gen() % 3 == 0) e = 1;  // expert 1 gets many
  }
  DevI idx_(idx), counts_(std::vector<int32_t>(size_t(E), -1)), offsets_(std::vector<int32_t>(size_t(E + 1), -1));
  DevI pos_(std::vector<int32_t>(size_t(slots), -1)), row_slot_(std::vector<int32_t>(size_t(slots), -1));
  ck::moe_permute(idx_.p, slots, E, counts_.p, offsets_.p, pos_.p, row_slot_.p, nullptr);
  std::vector<int32_t> cnt(size_t(E), 0), off(size_t(E + 1), 0), pos(static_cast<size_t>(slots)),
      row_slot(static_cast<size_t>(slots));
  for (int32_t e : idx) cnt[size_t(e)] += 1;
  for (int64_t e = 0; e < E; ++e) off[size_t(e + 1)] = off[size_t(e)] + cnt[size_t(e)];
  std::vector<int32_t> cursor(off.begin(), off.end() - 1);
  for (int64_t j = 0; j < slots; ++j) {
    pos[size_t(j)] = cursor[size_t(idx[size_t(j)])]++;
    row_slot[size_t(pos[size_t(j)])] = int32_t(j);
  }
  EXPECT_EQ(cnt[4], 0);
  EXPECT_EQ(counts_.get(), cnt);
  EXPECT_EQ(offsets_.get(), off);
  EXPECT_EQ(pos_.get(), pos);
  EXPECT_EQ(row_slot_.get(), row_slot);
  DevI inv_(std::vector<int32_t>(size_t(slots), -1));
  ck::moe_invert_permutation(pos_.p, slots, inv_.p, nullptr);
  EXPECT_EQ(inv_.get(), row_slot);
  // Combine: y[t] = sum_k w[t, k] out[pos[t K + k]], in k order.
  const Vec w = random_vec(size_t(slots), 8), out = random_vec(size_t(slots * H), 9);
  Dev w_(w), out_(out), y_(Vec(size_t(T * H), 7.0f));
  ck::moe_combine(w_.p, pos_.p, out_.p, T, H, K, y_.p, nullptr);
  const Vec y = y_.get();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < H; ++c) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += double(w[size_t(t * K + k)]) * out[size_t(pos[size_t(t * K + k)] * H + c)];
      EXPECT_NEAR(y[size_t(t * H + c)], acc, 1e-6 * (1.0 + std::fabs(acc))) << t << " " << c;
    }
}

}  // namespace

// The foreach kernels over a table of ranges of odd lengths (one ending inside a chunk, one a chunk
// and one element), two of them in one buffer: the sum of squares against a plain double loop, the
// scaling elementwise; the elements outside every range untouched.
TEST(CudaKernelsRaw, ForeachSumOfSquaresAndScale) {
  const int64_t chunk = ck::foreach_chunk();
  const Vec a = random_vec(size_t(chunk + 1), 31), b = random_vec(size_t(2 * chunk + 100), 32);
  Dev a_(a), b_(b);
  // a whole; b's [3, 3 + chunk - 7) and [chunk + 50, 2 chunk + 99): b's other elements in no range.
  const std::vector<std::pair<int64_t, int64_t>> spans = {{3, chunk - 7}, {chunk + 50, chunk + 49}};
  std::vector<ck::ForeachRange> ranges = {{a_.p, chunk + 1}};
  for (const auto& [at, n] : spans) ranges.push_back({b_.p + at, n});
  std::vector<ck::ForeachChunk> chunks;
  for (int64_t r = 0; r < int64_t(ranges.size()); ++r)
    for (int64_t at = 0; at < ranges[size_t(r)].n; at += chunk) chunks.push_back({r, at});
  auto table = [](const void* h, size_t bytes) {
    void* d = titan::gpu::alloc(bytes);
    titan::gpu::copy_to_device(d, h, bytes);
    return d;
  };
  void* dr = table(ranges.data(), ranges.size() * sizeof(ck::ForeachRange));
  void* dc = table(chunks.data(), chunks.size() * sizeof(ck::ForeachChunk));
  double* partial = static_cast<double*>(titan::gpu::alloc(chunks.size() * sizeof(double)));
  double* out = static_cast<double*>(titan::gpu::alloc(sizeof(double)));
  const auto* rt = static_cast<const ck::ForeachRange*>(dr);
  const auto* ct = static_cast<const ck::ForeachChunk*>(dc);
  ck::foreach_sum_squares(rt, ct, int64_t(chunks.size()), partial, out, nullptr);
  double got = 0, want = 0;
  titan::gpu::copy_to_host(&got, out, sizeof got);
  for (float x : a) want += double(x) * x;
  for (const auto& [at, n] : spans)
    for (int64_t i = at; i < at + n; ++i) want += double(b[size_t(i)]) * b[size_t(i)];
  EXPECT_NEAR(got, want, 1e-12 * want);
  ck::foreach_scale(rt, ct, int64_t(chunks.size()), -0.75f, nullptr);
  const Vec a2 = a_.get(), b2 = b_.get();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a2[i], a[i] * -0.75f) << i;
  for (int64_t i = 0; i < int64_t(b.size()); ++i) {
    bool in = false;
    for (const auto& [at, n] : spans) in = in || (i >= at && i < at + n);
    ASSERT_EQ(b2[size_t(i)], in ? b[size_t(i)] * -0.75f : b[size_t(i)]) << i;
  }
  for (void* p : {dr, dc, static_cast<void*>(partial), static_cast<void*>(out)}) titan::gpu::free(p);
}
