// The cases of the Gated DeltaNet op families (see verify.h): gated_delta (sequence forward and
// backward of the chunked form against the token recurrence, GQA ratios, chunk lengths that do not
// divide the sequence, initial and final states, packed documents, and the decode step),
// causal_conv1d (with a conv state, packed documents) and gated_rmsnorm.
#include <cmath>
#include <string>
#include <vector>

#include "ops/causal_conv1d/causal_conv1d.h"
#include "ops/gated_delta/gated_delta.h"
#include "ops/gated_rmsnorm/gated_rmsnorm.h"
#include "ops/verify/verify.h"

// Checks and finite-difference checks are written with designated initializers; the fields left
// out keep their defaults on purpose (GCC 12 warns about them all the same).
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace titan::verify_detail {

namespace {
using Outs = std::vector<Tensor>;

// beta in (0, 1) and g < 0 as the layer makes them (sigmoid, -exp(A) softplus(.)), from normals.
Tensor sigmoid_of(Tensor t) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = float(1.0 / (1.0 + std::exp(-double(t.data<float>()[i]))));
  return t;
}
Tensor neg_softplus_of(Tensor t) {
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = -float(std::log1p(std::exp(double(t.data<float>()[i]))));
  return t;
}

struct GdShape {
  int64_t B, S, Hk, Hv, dk, dv, chunk;
  bool state, l2norm;
};

CaseBody gated_delta_body(const GdShape& s, bool bf, uint64_t seed, const std::vector<int64_t>& seg) {
  using K = GatedDeltaKernel;
  const Tensor q = round_bf16(randn({s.B, s.S, s.Hk, s.dk}, seed), bf), k = round_bf16(randn({s.B, s.S, s.Hk, s.dk}, seed + 1), bf);
  const Tensor v = round_bf16(randn({s.B, s.S, s.Hv, s.dv}, seed + 2), bf);
  const Tensor g = round_bf16(neg_softplus_of(randn({s.B, s.S, s.Hv}, seed + 3, 1.0, -1.0)), bf);
  const Tensor beta = round_bf16(sigmoid_of(randn({s.B, s.S, s.Hv}, seed + 4)), bf);
  const Tensor init = s.state ? round_bf16(randn({s.B, s.Hv, s.dk, s.dv}, seed + 5, 0.5), bf) : Tensor();
  const Tensor dout = randn({s.B, s.S, s.Hv, s.dv}, seed + 6);
  const Tensor dfin = s.state ? randn({s.B, s.Hv, s.dk, s.dv}, seed + 7) : Tensor();
  GatedDeltaOptions o;
  o.chunk = s.chunk, o.l2norm = s.l2norm;
  auto forward = [=](const std::string& var) {
    const int64_t* sp = seg.empty() ? nullptr : seg.data();  // the lambda's own copy of seg
    Tensor out = Tensor::empty(v.shape(), DType::F32);
    Tensor fin = s.state ? Tensor::empty({s.B, s.Hv, s.dk, s.dv}, DType::F32) : Tensor();
    kernel<K>(var).forward(ExecContext::host(), q, k, v, g, beta, sp, init, o, out, fin);
    return s.state ? Outs{out, fin} : Outs{out};
  };
  auto backward = [=](const std::string& var) {
    const int64_t* sp = seg.empty() ? nullptr : seg.data();
    Tensor dq = Tensor::empty(q.shape(), DType::F32), dk = Tensor::empty(k.shape(), DType::F32),
           dv = Tensor::empty(v.shape(), DType::F32), dg = Tensor::empty(g.shape(), DType::F32),
           db = Tensor::empty(g.shape(), DType::F32);
    Tensor dinit = s.state ? Tensor::empty(init.shape(), DType::F32) : Tensor();
    kernel<K>(var).backward(ExecContext::host(), q, k, v, g, beta, sp, init, dout, dfin, o, dq, dk, dv, dg, db, dinit);
    return s.state ? Outs{dq, dk, dv, dg, db, dinit} : Outs{dq, dk, dv, dg, db};
  };
  CaseBody b;
  b.checks.push_back({.direction = "forward", .run = forward});
  b.checks.push_back({.direction = "backward", .run = backward});
  if (s.state && seg.empty() && s.B == 1)  // the decode step from the initial state, one token
    b.checks.push_back({.direction = "forward", .shape_suffix = ",step", .run = [=](const std::string& var) {
                          auto tok = [&](const Tensor& t) {
                            Shape sh = t.shape();
                            sh.erase(sh.begin() + 1);
                            return t.view({t.numel()}).slice0(0, t.numel() / s.S).clone().view(sh);
                          };
                          Tensor st = init.clone(), out = Tensor::empty({s.B, s.Hv, s.dv}, DType::F32);
                          kernel<K>(var).step(ExecContext::host(), tok(q), tok(k), tok(v), tok(g), tok(beta), o, st, out);
                          return Outs{st, out};
                        }});
  if (!bf) {
    std::vector<Tensor> inputs = {q, k, v, g, beta};
    if (s.state) inputs.push_back(init);
    b.fd = FdCheck{.inputs = inputs,
                   .loss = [=] {
                     const Outs f = forward("reference");
                     return dot(f[0], dout) + (s.state ? dot(f[1], dfin) : 0.0);
                   },
                   .grads = [=] { return backward("reference"); },
                   .eps = 1e-3};
  }
  return b;
}

}  // namespace

void cases_gated_delta(std::vector<KernelCase>& t) {
  using K = GatedDeltaKernel;
  const GdShape shapes[] = {
      {1, 1, 1, 1, 4, 4, 64, false, true},    {2, 13, 1, 2, 8, 6, 4, true, true},
      {1, 37, 2, 6, 16, 8, 16, true, true},   {1, 70, 2, 2, 32, 32, 64, false, true},
      {1, 20, 1, 4, 8, 8, 8, true, false},    {1, 9, 1, 1, 8, 8, 3, true, true},
  };
  for (bool bf : {false, true})
    for (const GdShape& s : shapes) {
      const std::string sh = dims({{"B", s.B}, {"S", s.S}, {"Hk", s.Hk}, {"Hv", s.Hv}, {"dk", s.dk}, {"dv", s.dv},
                                   {"chunk", s.chunk}, {"state", s.state}, {"l2norm", s.l2norm}});
      t.push_back(make_case<K>(sh, bf, [=] { return gated_delta_body(s, bf, 51, {}); }, !bf));
    }
  // Packed documents of lengths 1, 17, 9, 13 in one row and one whole row in the other; the state
  // restarts at each document (the initial state enters the first only).
  for (bool state : {false, true}) {
    const GdShape s{2, 40, 1, 2, 8, 8, 8, state, true};
    const std::string sh = "block_causal:" + dims({{"B", s.B}, {"S", s.S}, {"Hk", s.Hk}, {"Hv", s.Hv}, {"dk", s.dk},
                                                   {"dv", s.dv}, {"chunk", s.chunk}, {"state", s.state}});
    t.push_back(make_case<K>(sh, false, [=] {
      std::vector<int64_t> seg;
      for (int64_t n : {1, 17, 9, 13})
        for (int64_t i = 0, a = int64_t(seg.size()); i < n; ++i) seg.push_back(a);
      for (int64_t i = 0; i < s.S; ++i) seg.push_back(0);
      return gated_delta_body(s, false, 61, seg);
    }, true));
  }
}


namespace {

CaseBody conv_body(int64_t B, int64_t S, int64_t C, int64_t K, bool state, bool bf, uint64_t seed,
                   const std::vector<int64_t>& seg) {
  using Kn = CausalConv1dKernel;
  const Tensor x = round_bf16(randn({B, S, C}, seed), bf), w = round_bf16(randn({C, K}, seed + 1, 0.5), bf);
  const Tensor sin = state ? round_bf16(randn({B, C, K - 1}, seed + 2), bf) : Tensor();
  const Tensor dy = randn({B, S, C}, seed + 3), dw0 = randn({C, K}, seed + 4);
  auto forward = [=](const std::string& var) {
    const int64_t* sp = seg.empty() ? nullptr : seg.data();
    Tensor y = Tensor::empty(x.shape(), DType::F32), so = Tensor::empty({B, C, K - 1}, DType::F32);
    kernel<Kn>(var).forward(ExecContext::host(), x, w, sp, sin, y, so);
    return Outs{y, so};
  };
  auto backward = [=](const std::string& var, bool zero_dw) {
    const int64_t* sp = seg.empty() ? nullptr : seg.data();
    Tensor dx = Tensor::empty(x.shape(), DType::F32), dw = zero_dw ? Tensor::zeros(w.shape(), DType::F32) : dw0.clone();
    Tensor ds = state ? Tensor::empty(sin.shape(), DType::F32) : Tensor();
    kernel<Kn>(var).backward(ExecContext::host(), x, w, sp, sin, dy, dx, dw, ds);
    return state ? Outs{dx, dw, ds} : Outs{dx, dw};
  };
  CaseBody b;
  b.checks.push_back({.direction = "forward", .run = forward});
  b.checks.push_back({.direction = "backward", .run = [=](const std::string& v) { return backward(v, false); }});
  if (!bf) {
    std::vector<Tensor> in = {x, w};
    if (state) in.push_back(sin);
    b.fd = FdCheck{.inputs = in,
                   .loss = [=] { return dot(forward("reference")[0], dy); },
                   .grads = [=] { return backward("reference", true); },
                   .eps = 1e-3};
  }
  return b;
}

CaseBody gated_norm_body(int64_t N, int64_t D, bool bf, uint64_t seed) {
  using Kn = GatedRMSNormKernel;
  const Tensor x = round_bf16(randn({N, D}, seed), bf), z = round_bf16(randn({N, D}, seed + 1), bf);
  const Tensor w = round_bf16(randn({D}, seed + 2, 0.3, 1.0), bf), dy = randn({N, D}, seed + 3), dw0 = randn({D}, seed + 4);
  const float eps = 1e-6f;
  auto forward = [=](const std::string& var) {
    Tensor y = Tensor::empty(x.shape(), DType::F32);
    kernel<Kn>(var).forward(ExecContext::host(), x, z, w, eps, y);
    return Outs{y};
  };
  auto backward = [=](const std::string& var, bool zero_dw) {
    Tensor dx = Tensor::empty(x.shape(), DType::F32), dz = Tensor::empty(x.shape(), DType::F32);
    Tensor dw = zero_dw ? Tensor::zeros({D}, DType::F32) : dw0.clone();
    kernel<Kn>(var).backward(ExecContext::host(), x, z, w, eps, dy, dx, dz, dw);
    return Outs{dx, dz, dw};
  };
  CaseBody b;
  b.checks.push_back({.direction = "forward", .run = forward});
  b.checks.push_back({.direction = "backward", .run = [=](const std::string& v) { return backward(v, false); }});
  if (!bf)
    b.fd = FdCheck{.inputs = {x, z, w},
                   .loss = [=] { return dot(forward("reference")[0], dy); },
                   .grads = [=] { return backward("reference", true); },
                   .eps = 1e-3};
  return b;
}

}  // namespace

void cases_causal_conv1d(std::vector<KernelCase>& t) {
  using Kn = CausalConv1dKernel;
  const int64_t shapes[][5] = {{1, 1, 3, 4, 0}, {2, 9, 5, 4, 0}, {1, 20, 16, 3, 1}, {2, 6, 4, 4, 1}, {1, 2, 3, 4, 1}};
  for (bool bf : {false, true})
    for (const auto& s : shapes) {
      const int64_t B = s[0], S = s[1], C = s[2], K = s[3];
      const bool st = s[4] != 0;
      t.push_back(make_case<Kn>(dims({{"B", B}, {"S", S}, {"C", C}, {"K", K}, {"state", st}}), bf,
                                [=] { return conv_body(B, S, C, K, st, bf, 71, {}); }, !bf));
    }
  for (bool st : {false, true})
    t.push_back(make_case<Kn>("block_causal:" + dims({{"B", 2}, {"S", 20}, {"C", 6}, {"K", 4}, {"state", st}}), false, [=] {
      std::vector<int64_t> seg;
      for (int64_t n : {1, 7, 3, 9})
        for (int64_t i = 0, a = int64_t(seg.size()); i < n; ++i) seg.push_back(a);
      for (int64_t i = 0; i < 20; ++i) seg.push_back(0);
      return conv_body(2, 20, 6, 4, st, false, 81, seg);
    }, true));
}

void cases_gated_rmsnorm(std::vector<KernelCase>& t) {
  using Kn = GatedRMSNormKernel;
  const int64_t shapes[][2] = {{1, 1}, {3, 7}, {17, 33}, {130, 64}};
  for (bool bf : {false, true})
    for (const auto& s : shapes)
      t.push_back(make_case<Kn>(dims({{"N", s[0]}, {"D", s[1]}}), bf,
                                [=] { return gated_norm_body(s[0], s[1], bf, 91); }, !bf));
}

}  // namespace titan::verify_detail
