// The Gated DeltaNet ops and a layer composed of them against transformers' qwen3_5 torch fallbacks
// (tools/oracle/gated_deltanet_goldens.py, committed under tests/fixtures/qwen3_5): the delta rule's
// output, final state and gradients on both kernel sets (the cpu chunked form at several chunk
// lengths), a packed row against its documents run one by one, and Qwen3_5GatedDeltaNet's forward
// and backward (in_proj_qkv/z/b/a, conv, L2 norm, beta, g, delta rule, gated norm, out_proj).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/gated_delta/gated_delta.h"
#include "ops/gated_rmsnorm/gated_rmsnorm.h"

using namespace titan;

namespace {

const nlohmann::json& golden() {
  static const nlohmann::json j = [] {
    const std::string path = std::string(TITAN_FIXTURES) + "/qwen3_5/gated_deltanet.json";
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot open fixture " + path);
    return nlohmann::json::parse(f);
  }();
  return j;
}

Tensor tensor(const nlohmann::json& a, const Shape& s) {
  Tensor t = Tensor::empty(s, DType::F32);
  EXPECT_EQ(int64_t(a.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(a[size_t(i)].get<double>());
  return t;
}

// max |a - b| / max(max |b|, 1e-6): the error relative to the golden's scale.
double rel(const Tensor& a, const Tensor& b) {
  double d = 0, m = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    d = std::max(d, double(std::fabs(a.data<float>()[i] - b.data<float>()[i])));
    m = std::max(m, double(std::fabs(b.data<float>()[i])));
  }
  return std::isfinite(d) ? d / std::max(m, 1e-6) : 1e30;
}

constexpr double kFwdTol = 1e-5, kGradTol = 1e-3;

}  // namespace

TEST(GatedDeltaNetOracle, DeltaRuleMatchesTransformersChunkedAndRecurrent) {
  for (const auto& c : golden()["delta"]) {
    const int64_t B = c["B"], S = c["S"], Hk = c["Hk"], Hv = c["Hv"], dk = c["dk"], dv = c["dv"];
    const bool state = c["state"];
    const Tensor q = tensor(c["q"], {B, S, Hk, dk}), k = tensor(c["k"], {B, S, Hk, dk}), v = tensor(c["v"], {B, S, Hv, dv});
    const Tensor g = tensor(c["g"], {B, S, Hv}), beta = tensor(c["beta"], {B, S, Hv}), dout = tensor(c["dout"], v.shape());
    const Shape ss = {B, Hv, dk, dv};
    const Tensor init = state ? tensor(c["initial_state"], ss) : Tensor(), dfin = state ? tensor(c["dfin"], ss) : Tensor();
    const Tensor out_hf = tensor(c["out"], v.shape()), fin_hf = tensor(c["final_state"], ss);
    // transformers' own chunked and recurrent functions agree to f32 rounding
    EXPECT_LE(rel(tensor(c["out_recurrent"], v.shape()), out_hf), kFwdTol);
    const std::string at = "B=" + std::to_string(B) + " S=" + std::to_string(S) + " Hk=" + std::to_string(Hk) +
                           " Hv=" + std::to_string(Hv);
    for (const auto& [variant, chunk] : std::vector<std::pair<std::string, int64_t>>{
             {"reference", 64}, {"cpu", 64}, {"cpu", 16}, {"cpu", 37}, {"cpu", 1}}) {
      const auto& kern = kernel<GatedDeltaKernel>(variant);
      GatedDeltaOptions o;
      o.chunk = chunk;
      Tensor out = Tensor::empty(v.shape(), DType::F32), fin = Tensor::empty(ss, DType::F32);
      kern.forward(ExecContext::host(), q, k, v, g, beta, nullptr, init, o, out, fin);
      Tensor dq = Tensor::empty(q.shape(), DType::F32), dk_ = Tensor::empty(q.shape(), DType::F32),
             dv_ = Tensor::empty(v.shape(), DType::F32), dg = Tensor::empty(g.shape(), DType::F32),
             db = Tensor::empty(g.shape(), DType::F32), dinit = state ? Tensor::empty(ss, DType::F32) : Tensor();
      kern.backward(ExecContext::host(), q, k, v, g, beta, nullptr, init, dout, dfin, o, dq, dk_, dv_, dg, db, dinit);
      const double fo = rel(out, out_hf), ff = rel(fin, fin_hf);
      double gr = std::max({rel(dq, tensor(c["dq"], q.shape())), rel(dk_, tensor(c["dk_"], q.shape())),
                            rel(dv_, tensor(c["dv_"], v.shape())), rel(dg, tensor(c["dg"], g.shape())),
                            rel(db, tensor(c["dbeta"], g.shape()))});
      if (state) gr = std::max(gr, rel(dinit, tensor(c["d_initial_state"], ss)));
      std::printf("delta %s %s chunk=%lld: out %.2e, final state %.2e, grads %.2e (relative)\n", at.c_str(),
                  variant.c_str(), (long long)chunk, fo, ff, gr);
      EXPECT_LE(fo, kFwdTol) << at << " " << variant << " chunk " << chunk;
      EXPECT_LE(ff, kFwdTol) << at << " " << variant << " chunk " << chunk;
      EXPECT_LE(gr, kGradTol) << at << " " << variant << " chunk " << chunk;
    }
  }
}

TEST(GatedDeltaNetOracle, PackedRowEqualsItsDocumentsRunOneByOne) {
  const auto& c = golden()["packed"];
  std::vector<int64_t> seg;
  for (const auto& n : c["lengths"])
    for (int64_t i = 0, a = int64_t(seg.size()); i < n.get<int64_t>(); ++i) seg.push_back(a);
  const int64_t S = int64_t(seg.size()), Hk = c["Hk"], Hv = c["Hv"], dk = c["dk"], dv = c["dv"];
  const Tensor q = tensor(c["q"], {1, S, Hk, dk}), k = tensor(c["k"], {1, S, Hk, dk}), v = tensor(c["v"], {1, S, Hv, dv});
  const Tensor g = tensor(c["g"], {1, S, Hv}), beta = tensor(c["beta"], {1, S, Hv}), want = tensor(c["out"], v.shape());
  for (const char* variant : {"reference", "cpu"}) {
    Tensor out = Tensor::empty(v.shape(), DType::F32), none;
    kernel<GatedDeltaKernel>(variant).forward(ExecContext::host(), q, k, v, g, beta, seg.data(), none, {}, out, none);
    std::printf("packed %s: out %.2e (relative)\n", variant, rel(out, want));
    EXPECT_LE(rel(out, want), kFwdTol) << variant;
  }
}

namespace {

// y[n, o] = sum_i x[n, i] W[o, i] (nn.Linear without bias), in double.
Tensor linear(const Tensor& x, const Tensor& W) {
  const int64_t N = x.numel() / W.dim(1), I = W.dim(1), O = W.dim(0);
  Tensor y = Tensor::empty({N, O}, DType::F32);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      double s = 0;
      for (int64_t i = 0; i < I; ++i) s += double(x.data<float>()[n * I + i]) * W.data<float>()[o * I + i];
      y.data<float>()[n * O + o] = float(s);
    }
  return y;
}
// dx += dy W, dW = dy^T x.
void linear_back(const Tensor& x, const Tensor& W, const Tensor& dy, Tensor& dx, Tensor& dW) {
  const int64_t N = x.numel() / W.dim(1), I = W.dim(1), O = W.dim(0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < I; ++i) {
      double s = 0;
      for (int64_t o = 0; o < O; ++o) s += double(dy.data<float>()[n * O + o]) * W.data<float>()[o * I + i];
      dx.data<float>()[n * I + i] += float(s);
    }
  for (int64_t o = 0; o < O; ++o)
    for (int64_t i = 0; i < I; ++i) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) s += double(dy.data<float>()[n * O + o]) * x.data<float>()[n * I + i];
      dW.data<float>()[o * I + i] = float(s);
    }
}
// Columns [c0, c0 + w) of a [N, C] tensor, and the scatter back.
Tensor cols(const Tensor& t, int64_t c0, int64_t w) {
  const int64_t N = t.dim(0), C = t.dim(1);
  Tensor r = Tensor::empty({N, w}, DType::F32);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < w; ++j) r.data<float>()[n * w + j] = t.data<float>()[n * C + c0 + j];
  return r;
}
void put_cols(Tensor& t, int64_t c0, const Tensor& r) {
  const int64_t N = t.dim(0), C = t.dim(1), w = r.numel() / N;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < w; ++j) t.data<float>()[n * C + c0 + j] = r.data<float>()[n * w + j];
}

}  // namespace

TEST(GatedDeltaNetOracle, LayerComposedOfTheOpsMatchesQwen3_5GatedDeltaNet) {
  const auto& c = golden()["layer"];
  const int64_t H = c["hidden"], Hk = c["Hk"], Hv = c["Hv"], dk = c["dk"], dv = c["dv"], K = c["K"], S = c["S"];
  const float eps = float(c["eps"].get<double>());
  const int64_t KD = Hk * dk, VD = Hv * dv, CD = 2 * KD + VD;
  std::map<std::string, Tensor> P;
  for (auto it = c["params"].begin(); it != c["params"].end(); ++it)
    P[it.key()] = tensor(it.value(), c["shapes"][it.key()].get<Shape>());
  const Tensor x = tensor(c["x"], {S, H}), dy = tensor(c["dy"], {S, H});
  const Tensor convw = P["conv1d.weight"].view({CD, K});
  for (const char* variant : {"reference", "cpu"}) {
    const ExecContext& cx = ExecContext::host();
    // forward
    const Tensor mixed = linear(x, P["in_proj_qkv.weight"]), z = linear(x, P["in_proj_z.weight"]);
    const Tensor bb = linear(x, P["in_proj_b.weight"]), aa = linear(x, P["in_proj_a.weight"]);
    Tensor conv = Tensor::empty({1, S, CD}, DType::F32), none;
    kernel<CausalConv1dKernel>(variant).forward(cx, mixed.view({1, S, CD}), convw, nullptr, none, conv, none);
    const Tensor c2 = conv.view({S, CD});
    const Tensor q = cols(c2, 0, KD).view({1, S, Hk, dk}), k = cols(c2, KD, KD).view({1, S, Hk, dk}),
                 v = cols(c2, 2 * KD, VD).view({1, S, Hv, dv});
    Tensor beta = Tensor::empty({1, S, Hv}, DType::F32), g = Tensor::empty({1, S, Hv}, DType::F32);
    for (int64_t t = 0; t < S; ++t)
      for (int64_t h = 0; h < Hv; ++h) {
        const double b = bb.data<float>()[t * Hv + h], a = aa.data<float>()[t * Hv + h] + P["dt_bias"].data<float>()[h];
        beta.data<float>()[t * Hv + h] = float(1.0 / (1.0 + std::exp(-b)));
        g.data<float>()[t * Hv + h] = float(-std::exp(double(P["A_log"].data<float>()[h])) * std::log1p(std::exp(a)));
      }
    Tensor o = Tensor::empty({1, S, Hv, dv}, DType::F32);
    kernel<GatedDeltaKernel>(variant).forward(cx, q, k, v, g, beta, nullptr, none, {}, o, none);
    Tensor n = Tensor::empty({S * Hv, dv}, DType::F32);
    kernel<GatedRMSNormKernel>(variant).forward(cx, o.view({S * Hv, dv}), z.view({S * Hv, dv}), P["norm.weight"], eps, n);
    const Tensor y = linear(n.view({S, VD}), P["out_proj.weight"]);
    // backward
    std::map<std::string, Tensor> G;
    for (auto& [name, p] : P) G[name] = Tensor::zeros(p.shape(), DType::F32);
    Tensor dn = Tensor::zeros({S, VD}, DType::F32);
    linear_back(n.view({S, VD}), P["out_proj.weight"], dy, dn, G["out_proj.weight"]);
    Tensor dout = Tensor::empty({S * Hv, dv}, DType::F32), dz = Tensor::empty({S * Hv, dv}, DType::F32);
    kernel<GatedRMSNormKernel>(variant).backward(cx, o.view({S * Hv, dv}), z.view({S * Hv, dv}), P["norm.weight"], eps,
                                                 dn.view({S * Hv, dv}), dout, dz, G["norm.weight"]);
    Tensor dq = Tensor::empty(q.shape(), DType::F32), dk_ = Tensor::empty(k.shape(), DType::F32),
           dv_ = Tensor::empty(v.shape(), DType::F32), dg = Tensor::empty(g.shape(), DType::F32),
           dbeta = Tensor::empty(g.shape(), DType::F32);
    kernel<GatedDeltaKernel>(variant).backward(cx, q, k, v, g, beta, nullptr, none, dout.view({1, S, Hv, dv}), none, {},
                                               dq, dk_, dv_, dg, dbeta, none);
    Tensor db = Tensor::empty({S, Hv}, DType::F32), da = Tensor::empty({S, Hv}, DType::F32);
    for (int64_t t = 0; t < S; ++t)
      for (int64_t h = 0; h < Hv; ++h) {
        const int64_t i = t * Hv + h;
        const double be = beta.data<float>()[i], a = aa.data<float>()[i] + P["dt_bias"].data<float>()[h];
        const double eA = std::exp(double(P["A_log"].data<float>()[h])), gg = dg.data<float>()[i];
        db.data<float>()[i] = float(dbeta.data<float>()[i] * be * (1.0 - be));
        da.data<float>()[i] = float(-gg * eA / (1.0 + std::exp(-a)));
        G["A_log"].data<float>()[h] += float(gg * g.data<float>()[i]);
        G["dt_bias"].data<float>()[h] += da.data<float>()[i];
      }
    Tensor dconv = Tensor::empty({S, CD}, DType::F32);
    put_cols(dconv, 0, dq.view({S, KD}));
    put_cols(dconv, KD, dk_.view({S, KD}));
    put_cols(dconv, 2 * KD, dv_.view({S, VD}));
    Tensor dmixed = Tensor::empty({1, S, CD}, DType::F32), dcw = G["conv1d.weight"].view({CD, K});
    kernel<CausalConv1dKernel>(variant).backward(cx, mixed.view({1, S, CD}), convw, nullptr, none, dconv.view({1, S, CD}),
                                                 dmixed, dcw, none);
    Tensor dx = Tensor::zeros({S, H}, DType::F32);
    linear_back(x, P["in_proj_qkv.weight"], dmixed.view({S, CD}), dx, G["in_proj_qkv.weight"]);
    linear_back(x, P["in_proj_z.weight"], dz.view({S, VD}), dx, G["in_proj_z.weight"]);
    linear_back(x, P["in_proj_b.weight"], db, dx, G["in_proj_b.weight"]);
    linear_back(x, P["in_proj_a.weight"], da, dx, G["in_proj_a.weight"]);
    // against transformers
    const double fy = rel(y, tensor(c["y"], {S, H})), fx = rel(dx, tensor(c["dx"], {S, H}));
    std::printf("layer %s: y %.2e, dx %.2e (relative)\n", variant, fy, fx);
    EXPECT_LE(fy, kFwdTol) << variant;
    EXPECT_LE(fx, kGradTol) << variant;
    for (auto& [name, gt] : G) {
      const double e = rel(gt, tensor(c["grads"][name], gt.shape()));
      std::printf("layer %s: d %s %.2e\n", variant, name.c_str(), e);
      EXPECT_LE(e, kGradTol) << variant << " " << name;
    }
  }
}
