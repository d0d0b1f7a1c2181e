// The cases of the Gated DeltaNet op families (see verify.h): gated_delta (sequence forward and
// backward of the chunked form against the token recurrence, GQA ratios, chunk lengths that do not
// divide the sequence, initial and final states, packed documents, and the decode step).
#include <cmath>
#include <string>
#include <vector>

#include "ops/gated_delta/gated_delta.h"
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

}  // namespace titan::verify_detail
