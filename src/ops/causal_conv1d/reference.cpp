// causal_conv1d, reference variant in double (causal_conv1d.h):
//   a = sum_j w[c, j] x[t - K + 1 + j],  y = a sigmoid(a)
//   da = dy (s + a s (1 - s)),  dx[t - K + 1 + j] += w[c, j] da[t],  dw[c, j] += da[t] x[t - K + 1 + j]
#include <cmath>
#include <vector>

#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

using conv1d::Dims;

// The document start of each token (0 without seg).
std::vector<int64_t> starts(const int64_t* seg, const Dims& d) {
  std::vector<int64_t> s(size_t(d.B * d.S), 0);
  if (seg)
    for (int64_t i = 0; i < d.B * d.S; ++i) s[size_t(i)] = seg[i];
  return s;
}

double pre(const float* x, const float* w, const float* st, const Dims& d, int64_t b, int64_t t, int64_t c, int64_t a0) {
  double a = 0;
  for (int64_t j = 0; j < d.K; ++j) a += double(w[c * d.K + j]) * conv1d::input_at(x, st, d, b, t - d.K + 1 + j, c, a0);
  return a;
}

void forward(const ExecContext& ctx, const Tensor& x, const Tensor& w, const int64_t* seg, const Tensor& sin, Tensor& y,
             Tensor& sout) {
  opcheck::host_context(ctx, "causal_conv1d.reference");
  const Dims d = conv1d::check(x, w, seg, sin, y, sout, "causal_conv1d.reference forward");
  const std::vector<int64_t> st = starts(seg, d);
  const float *xp = x.data<float>(), *wp = w.data<float>(), *sp = sin.defined() ? sin.data<float>() : nullptr;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = 0; t < d.S; ++t)
      for (int64_t c = 0; c < d.C; ++c) {
        const double a = pre(xp, wp, sp, d, b, t, c, st[size_t(b * d.S + t)]);
        y.data<float>()[(b * d.S + t) * d.C + c] = float(a / (1.0 + std::exp(-a)));
      }
  if (sout.defined()) {
    for (int64_t b = 0; b < d.B; ++b) {
      const int64_t last = d.S > 0 ? st[size_t(b * d.S + d.S - 1)] : 0;
      for (int64_t c = 0; c < d.C; ++c)
        for (int64_t j = 0; j < d.K - 1; ++j)
          sout.data<float>()[(b * d.C + c) * (d.K - 1) + j] = conv1d::input_at(xp, sp, d, b, d.S - (d.K - 1) + j, c, last);
    }
  }
}

void backward(const ExecContext& ctx, const Tensor& x, const Tensor& w, const int64_t* seg, const Tensor& sin,
              const Tensor& dy, Tensor& dx, Tensor& dw, Tensor& dsin) {
  opcheck::host_context(ctx, "causal_conv1d.reference");
  const Dims d = conv1d::check(x, w, seg, sin, dy, dsin, "causal_conv1d.reference backward");
  conv1d::check(x, w, seg, sin, dx, Tensor(), "causal_conv1d.reference backward");
  TITAN_CHECK(dw.defined() && dw.dtype() == DType::F32 && dw.shape() == w.shape(),
              "causal_conv1d.reference backward: 'dw' must be f32 like w ", w.str());
  const std::vector<int64_t> st = starts(seg, d);
  const float *xp = x.data<float>(), *wp = w.data<float>(), *sp = sin.defined() ? sin.data<float>() : nullptr;
  std::vector<double> gx(size_t(d.B * d.S * d.C), 0.0), gw(size_t(d.C * d.K), 0.0), gs(size_t(d.B * d.C * (d.K - 1)), 0.0);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = 0; t < d.S; ++t)
      for (int64_t c = 0; c < d.C; ++c) {
        const int64_t a0 = st[size_t(b * d.S + t)];
        const double a = pre(xp, wp, sp, d, b, t, c, a0), s = 1.0 / (1.0 + std::exp(-a));
        const double da = double(dy.data<float>()[(b * d.S + t) * d.C + c]) * (s + a * s * (1.0 - s));
        for (int64_t j = 0; j < d.K; ++j) {
          const int64_t u = t - d.K + 1 + j;
          gw[size_t(c * d.K + j)] += da * conv1d::input_at(xp, sp, d, b, u, c, a0);
          if (u >= a0) gx[size_t((b * d.S + u) * d.C + c)] += double(wp[c * d.K + j]) * da;
          else if (a0 == 0 && u < 0) gs[size_t((b * d.C + c) * (d.K - 1) + (d.K - 1 + u))] += double(wp[c * d.K + j]) * da;
        }
      }
  for (size_t i = 0; i < gx.size(); ++i) dx.data<float>()[i] = float(gx[i]);
  for (size_t i = 0; i < gw.size(); ++i) dw.data<float>()[i] = float(double(dw.data<float>()[i]) + gw[i]);
  if (dsin.defined())
    for (size_t i = 0; i < gs.size(); ++i) dsin.data<float>()[i] = float(gs[i]);
}

const CausalConv1dKernel kReference{"reference", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(CausalConv1dKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
