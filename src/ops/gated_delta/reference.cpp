// The gated delta rule, reference variant: transformers' torch_recurrent_gated_delta_rule token by
// token in double (gated_delta.h). The backward keeps the state before every token and runs the
// recurrence in reverse:
//   S' = a S_prev (a = exp g), kv = S'^T k, delta = beta (v - kv), S = S' + k delta^T, o = S^T q
//   dq = S do;  dS += q do^T;  dk = dS delta;  ddelta = dS^T k;  dv = beta ddelta;
//   dbeta = (v - kv) . ddelta;  dkv = -beta ddelta;  dS' = dS + k dkv^T;  dk += S' dkv;
//   dg = a <S_prev, dS'>;  dS_prev = a dS'
// and the L2 normalisation's backward dx = r (dy - y (y . dy)) (y = x r) after the heads of a
// group have added their dq^, dk^.
#include <cmath>
#include <vector>

#include "ops/gated_delta/gated_delta.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

using gated_delta::Dims;
constexpr double kNormEps = 1e-6;

// q^ or k^ of every token and key head in double: [B, S, Hk, d], with r = 1 / sqrt(|x|^2 + eps).
struct Normed {
  std::vector<double> y, r;
};
Normed normalise(const Tensor& x, const Dims& d, double scale, bool l2) {
  const int64_t n = d.B * d.S * d.Hk;
  Normed o{std::vector<double>(size_t(n * d.dk)), std::vector<double>(size_t(n), 1.0)};
  const float* p = x.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < d.dk; ++j) ss += double(p[i * d.dk + j]) * p[i * d.dk + j];
    const double r = l2 ? 1.0 / std::sqrt(ss + kNormEps) : 1.0;
    o.r[size_t(i)] = r;
    for (int64_t j = 0; j < d.dk; ++j) o.y[size_t(i * d.dk + j)] = scale * double(p[i * d.dk + j]) * r;
  }
  return o;
}

// dx from dy (both [n, dk]) through y = scale x r.
void unnormalise(const Normed& nx, const std::vector<double>& dy, const Dims& d, double scale, bool l2, Tensor& dx) {
  const int64_t n = d.B * d.S * d.Hk;
  float* o = dx.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double* y = nx.y.data() + i * d.dk;  // scale * x r
    const double* g = dy.data() + i * d.dk;
    double dot = 0;
    for (int64_t j = 0; j < d.dk; ++j) dot += (y[j] / scale) * g[j];
    for (int64_t j = 0; j < d.dk; ++j)
      o[i * d.dk + j] = float(l2 ? scale * nx.r[size_t(i)] * (g[j] - (y[j] / scale) * dot) : scale * g[j]);
  }
}

// One token of the recurrence on state st [DK, DV]: st *= a; delta = bt (v - st^T k) [DV];
// st += k delta^T. Shared by the forward and the backward's re-run of it.
void advance_state(double* st, const double* kt, const float* v, double a, double bt, double* delta, int64_t DK,
                   int64_t DV) {
  for (int64_t i = 0; i < DK * DV; ++i) st[i] *= a;
  for (int64_t j = 0; j < DV; ++j) {
    double s = 0;
    for (int64_t i = 0; i < DK; ++i) s += st[i * DV + j] * kt[i];
    delta[j] = bt * (double(v[j]) - s);
  }
  for (int64_t i = 0; i < DK; ++i)
    for (int64_t j = 0; j < DV; ++j) st[i * DV + j] += kt[i] * delta[j];
}

bool starts_document(const int64_t* seg, const Dims& d, int64_t b, int64_t t) {
  return t == 0 || (seg && seg[b * d.S + t] == t);
}

void forward(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
             const Tensor& beta, const int64_t* seg, const Tensor& init, const GatedDeltaOptions& o, Tensor& out,
             Tensor& fin) {
  opcheck::host_context(ctx, "gated_delta.reference");
  const Dims d = gated_delta::check_forward(q, k, v, g, beta, seg, init, out, fin, "gated_delta.reference forward");
  const double scale = gated_delta::scale_of(o, d.dk);
  const Normed qn = normalise(q, d, scale, o.l2norm), kn = normalise(k, d, 1.0, o.l2norm);
  const int64_t ratio = d.Hv / d.Hk, DK = d.dk, DV = d.dv;
  const float *vp = v.data<float>(), *gp = g.data<float>(), *bp = beta.data<float>();
  float* op = out.data<float>();
  std::vector<double> st(size_t(DK * DV)), kv(static_cast<size_t>(DV));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.Hv; ++h) {
      const int64_t hk = h / ratio;
      for (int64_t i = 0; i < DK * DV; ++i)
        st[size_t(i)] = init.defined() ? double(init.data<float>()[(b * d.Hv + h) * DK * DV + i]) : 0.0;
      for (int64_t t = 0; t < d.S; ++t) {
        if (t > 0 && starts_document(seg, d, b, t)) std::fill(st.begin(), st.end(), 0.0);
        const int64_t tk = (b * d.S + t) * d.Hk + hk, tv = (b * d.S + t) * d.Hv + h;
        const double* qt = qn.y.data() + tk * DK;
        const double* kt = kn.y.data() + tk * DK;
        const double a = std::exp(double(gp[tv])), bt = bp[tv];
        advance_state(st.data(), kt, vp + tv * DV, a, bt, kv.data(), DK, DV);
        for (int64_t j = 0; j < DV; ++j) {
          double s = 0;
          for (int64_t i = 0; i < DK; ++i) s += st[size_t(i * DV + j)] * qt[i];
          op[tv * DV + j] = float(s);
        }
      }
      if (fin.defined())
        for (int64_t i = 0; i < DK * DV; ++i) fin.data<float>()[(b * d.Hv + h) * DK * DV + i] = float(st[size_t(i)]);
    }
}

void backward(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
              const Tensor& beta, const int64_t* seg, const Tensor& init, const Tensor& dout, const Tensor& dfin,
              const GatedDeltaOptions& o, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dg, Tensor& dbeta,
              Tensor& dinit) {
  opcheck::host_context(ctx, "gated_delta.reference");
  const Dims d = gated_delta::check_backward(q, k, v, g, beta, seg, init, dout, dfin, dq, dk, dv, dg, dbeta, dinit,
                                             "gated_delta.reference backward");
  const double scale = gated_delta::scale_of(o, d.dk);
  const Normed qn = normalise(q, d, scale, o.l2norm), kn = normalise(k, d, 1.0, o.l2norm);
  const int64_t ratio = d.Hv / d.Hk, DK = d.dk, DV = d.dv, SS = DK * DV;
  const float *vp = v.data<float>(), *gp = g.data<float>(), *bp = beta.data<float>(), *dop = dout.data<float>();
  std::vector<double> dqn(qn.y.size(), 0.0), dkn(kn.y.size(), 0.0);
  std::vector<double> prev(size_t(d.S * SS));  // the state before each token (after a document reset)
  std::vector<double> st(static_cast<size_t>(SS)), sp(static_cast<size_t>(SS)), ds(static_cast<size_t>(SS)), delta(static_cast<size_t>(DV)), kvv(static_cast<size_t>(DV)),
      dd(static_cast<size_t>(DV));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < d.Hv; ++h) {
      const int64_t hk = h / ratio;
      for (int64_t i = 0; i < SS; ++i) st[size_t(i)] = init.defined() ? double(init.data<float>()[(b * d.Hv + h) * SS + i]) : 0.0;
      for (int64_t t = 0; t < d.S; ++t) {  // forward, keeping the states
        if (t > 0 && starts_document(seg, d, b, t)) std::fill(st.begin(), st.end(), 0.0);
        std::copy(st.begin(), st.end(), prev.begin() + t * SS);
        const int64_t tk = (b * d.S + t) * d.Hk + hk, tv = (b * d.S + t) * d.Hv + h;
        const double* kt = kn.y.data() + tk * DK;
        const double a = std::exp(double(gp[tv])), bt = bp[tv];
        advance_state(st.data(), kt, vp + tv * DV, a, bt, delta.data(), DK, DV);
      }
      for (int64_t i = 0; i < SS; ++i) ds[size_t(i)] = dfin.defined() ? double(dfin.data<float>()[(b * d.Hv + h) * SS + i]) : 0.0;
      for (int64_t t = d.S - 1; t >= 0; --t) {
        const int64_t tk = (b * d.S + t) * d.Hk + hk, tv = (b * d.S + t) * d.Hv + h;
        const double* qt = qn.y.data() + tk * DK;
        const double* kt = kn.y.data() + tk * DK;
        const double* pv = prev.data() + t * SS;
        const double a = std::exp(double(gp[tv])), bt = bp[tv];
        for (int64_t i = 0; i < SS; ++i) sp[size_t(i)] = a * pv[i];
        for (int64_t j = 0; j < DV; ++j) {
          double s = 0;
          for (int64_t i = 0; i < DK; ++i) s += sp[size_t(i * DV + j)] * kt[i];
          kvv[size_t(j)] = s;
          delta[size_t(j)] = bt * (double(vp[tv * DV + j]) - s);
        }
        const float* dot_ = dop + tv * DV;
        double* dqt = dqn.data() + tk * DK;
        double* dkt = dkn.data() + tk * DK;
        for (int64_t i = 0; i < DK; ++i) {  // dq = S do with S = S' + k delta^T
          double s = 0;
          for (int64_t j = 0; j < DV; ++j) s += (sp[size_t(i * DV + j)] + kt[i] * delta[size_t(j)]) * dot_[j];
          dqt[i] += s;
        }
        for (int64_t i = 0; i < DK; ++i)
          for (int64_t j = 0; j < DV; ++j) ds[size_t(i * DV + j)] += qt[i] * dot_[j];
        for (int64_t i = 0; i < DK; ++i) {
          double s = 0;
          for (int64_t j = 0; j < DV; ++j) s += ds[size_t(i * DV + j)] * delta[size_t(j)];
          dkt[i] += s;
        }
        double dbt = 0;
        for (int64_t j = 0; j < DV; ++j) {
          double s = 0;
          for (int64_t i = 0; i < DK; ++i) s += ds[size_t(i * DV + j)] * kt[i];
          dd[size_t(j)] = s;
          dv.data<float>()[tv * DV + j] = float(bt * s);
          dbt += (double(vp[tv * DV + j]) - kvv[size_t(j)]) * s;
        }
        dbeta.data<float>()[tv] = float(dbt);
        for (int64_t i = 0; i < DK; ++i) {  // dS' = dS - beta k ddelta^T;  dk += S' (-beta ddelta)
          double s = 0;
          for (int64_t j = 0; j < DV; ++j) {
            ds[size_t(i * DV + j)] -= bt * kt[i] * dd[size_t(j)];
            s += sp[size_t(i * DV + j)] * dd[size_t(j)];
          }
          dkt[i] -= bt * s;
        }
        double da = 0;
        for (int64_t i = 0; i < SS; ++i) da += pv[i] * ds[size_t(i)];
        dg.data<float>()[tv] = float(a * da);
        for (auto& x : ds) x *= a;
        if (t == 0) {
          if (dinit.defined())
            for (int64_t i = 0; i < SS; ++i) dinit.data<float>()[(b * d.Hv + h) * SS + i] = float(ds[size_t(i)]);
        } else if (starts_document(seg, d, b, t)) {
          std::fill(ds.begin(), ds.end(), 0.0);  // the previous document's state was dropped here
        }
      }
    }
  unnormalise(qn, dqn, d, scale, o.l2norm, dq);
  unnormalise(kn, dkn, d, 1.0, o.l2norm, dk);
}

void step(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
          const Tensor& beta, const GatedDeltaOptions& o, Tensor& state, Tensor& out) {
  opcheck::host_context(ctx, "gated_delta.reference");
  const Dims d = gated_delta::check_step(q, k, v, g, beta, state, out, "gated_delta.reference step");
  // One token of the sequence form, from `state` into itself.
  auto as_seq = [](const Tensor& t) {
    Shape s = t.shape();
    s.insert(s.begin() + 1, 1);
    return t.view(s);
  };
  Tensor fin = Tensor::empty(state.shape(), DType::F32), o4 = as_seq(out);
  forward(ctx, as_seq(q), as_seq(k), as_seq(v), as_seq(g), as_seq(beta), nullptr, state, o, o4, fin);
  state.copy_(fin);
  (void)d;
}

const GatedDeltaKernel kReference{"reference", forward, backward, step};

}  // namespace
TITAN_REGISTER_KERNEL(GatedDeltaKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
