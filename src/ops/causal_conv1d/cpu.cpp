// causal_conv1d, cpu variant in f32 (causal_conv1d.h): tokens in parallel for the forward and the
// input gradient (channels contiguous, the inner loop), channel blocks in parallel for dw (each
// summed over tokens in order, so results do not depend on the thread count).
#include <cmath>
#include <vector>

#include "core/threading.h"
#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

using conv1d::Dims;

inline int64_t start_of(const int64_t* seg, const Dims& d, int64_t b, int64_t t) { return seg ? seg[b * d.S + t] : 0; }

// The pre-activations a[b, t, :] of one token.
void pre_row(const float* x, const float* w, const float* st, const Dims& d, int64_t b, int64_t t, int64_t a0, float* a) {
  for (int64_t c = 0; c < d.C; ++c) a[c] = 0.0f;
  for (int64_t j = 0; j < d.K; ++j) {
    const int64_t u = t - d.K + 1 + j;
    if (u >= a0) {
      const float* xr = x + (b * d.S + u) * d.C;
      for (int64_t c = 0; c < d.C; ++c) a[c] += w[c * d.K + j] * xr[c];
    } else if (a0 == 0 && st) {
      for (int64_t c = 0; c < d.C; ++c) a[c] += w[c * d.K + j] * st[(b * d.C + c) * (d.K - 1) + (d.K - 1 + u)];
    }
  }
}

void forward(const ExecContext& ctx, const Tensor& x, const Tensor& w, const int64_t* seg, const Tensor& sin, Tensor& y,
             Tensor& sout) {
  opcheck::host_context(ctx, "causal_conv1d.cpu");
  const Dims d = conv1d::check(x, w, seg, sin, y, sout, "causal_conv1d.cpu forward");
  const float *xp = x.data<float>(), *wp = w.data<float>(), *sp = sin.defined() ? sin.data<float>() : nullptr;
  float* yp = y.data<float>();
  parallel_for(d.B * d.S, 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / d.S, t = i % d.S;
      float* a = yp + i * d.C;
      pre_row(xp, wp, sp, d, b, t, start_of(seg, d, b, t), a);
      for (int64_t c = 0; c < d.C; ++c) a[c] = a[c] / (1.0f + std::exp(-a[c]));
    }
  });
  if (sout.defined())
    for (int64_t b = 0; b < d.B; ++b) {
      const int64_t last = d.S > 0 ? start_of(seg, d, b, d.S - 1) : 0;
      for (int64_t c = 0; c < d.C; ++c)
        for (int64_t j = 0; j < d.K - 1; ++j)
          sout.data<float>()[(b * d.C + c) * (d.K - 1) + j] = conv1d::input_at(xp, sp, d, b, d.S - (d.K - 1) + j, c, last);
    }
}

void backward(const ExecContext& ctx, const Tensor& x, const Tensor& w, const int64_t* seg, const Tensor& sin,
              const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& dsin) {
  opcheck::host_context(ctx, "causal_conv1d.cpu");
  const Dims d = conv1d::check(x, w, seg, sin, dy, dsin, "causal_conv1d.cpu backward");
  conv1d::check(x, w, seg, sin, dx, Tensor(), "causal_conv1d.cpu backward");
  TITAN_CHECK(dw.defined() && dw.dtype() == DType::F32 && dw.shape() == w.shape(),
              "causal_conv1d.cpu backward: 'dw' must be f32 like w ", w.str());
  const float *xp = x.data<float>(), *wp = w.data<float>(), *sp = sin.defined() ? sin.data<float>() : nullptr;
  std::vector<float> da(size_t(d.B * d.S * d.C));
  parallel_for(d.B * d.S, 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / d.S, t = i % d.S;
      float* a = da.data() + i * d.C;
      pre_row(xp, wp, sp, d, b, t, start_of(seg, d, b, t), a);
      const float* g = dy.data<float>() + i * d.C;
      for (int64_t c = 0; c < d.C; ++c) {
        const float s = 1.0f / (1.0f + std::exp(-a[c]));
        a[c] = g[c] * (s + a[c] * s * (1.0f - s));
      }
    }
  });
  // dx[u] = sum_j w[:, j] da[u + K - 1 - j] over the tokens of u's document
  parallel_for(d.B * d.S, 16, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / d.S, u = i % d.S;
      float* o = dx.data<float>() + i * d.C;
      for (int64_t c = 0; c < d.C; ++c) o[c] = 0.0f;
      for (int64_t j = 0; j < d.K; ++j) {
        const int64_t t = u + d.K - 1 - j;
        if (t >= d.S || start_of(seg, d, b, t) > u) continue;
        const float* g = da.data() + (b * d.S + t) * d.C;
        for (int64_t c = 0; c < d.C; ++c) o[c] += wp[c * d.K + j] * g[c];
      }
    }
  });
  parallel_for(d.C, 64, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t j = 0; j < d.K; ++j) {
        float s = 0;
        for (int64_t b = 0; b < d.B; ++b)
          for (int64_t t = 0; t < d.S; ++t)
            s += da[size_t((b * d.S + t) * d.C + c)] * conv1d::input_at(xp, sp, d, b, t - d.K + 1 + j, c, start_of(seg, d, b, t));
        dw.data<float>()[c * d.K + j] += s;
      }
  });
  if (dsin.defined())
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t c = 0; c < d.C; ++c)
        for (int64_t m = 0; m < d.K - 1; ++m) {  // state slot m is input position u = m - (K - 1)
          float s = 0;
          for (int64_t j = 0; j < d.K; ++j) {
            const int64_t t = m - (d.K - 1) + d.K - 1 - j;
            if (t >= 0 && t < d.S && start_of(seg, d, b, t) == 0) s += wp[c * d.K + j] * da[size_t((b * d.S + t) * d.C + c)];
          }
          dsin.data<float>()[(b * d.C + c) * (d.K - 1) + m] = s;
        }
}

const CausalConv1dKernel kCpu{"cpu", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(CausalConv1dKernel, "cpu", DeviceType::CPU, kCpu);
}  // namespace titan
