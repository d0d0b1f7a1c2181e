// The cases of the larger op families (see verify.h): attention, swiglu, cross_entropy, adamw, moe.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/adamw/adamw.h"
#include "ops/attention/attention.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/moe/moe.h"
#include "ops/swiglu/swiglu.h"
#include "ops/verify/verify.h"

// Checks and finite-difference checks are written with designated initializers; the fields left
// out keep their defaults on purpose (GCC 12 warns about them all the same).
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace titan::verify_detail {

namespace {
using Outs = std::vector<Tensor>;

// Attention forward and backward on q, k, v [B, S, H*, D] drawn from seeds seed..seed+3, with a
// finite-difference check in f32. seg: each token's document start (block-causal), or empty
// (causal).
CaseBody attention_body(int64_t B, int64_t S, int64_t Hq, int64_t Hkv, int64_t D, bool bf, uint64_t seed,
                        const std::vector<int64_t>& seg) {
  using K = AttentionKernel;
  const Tensor q = round_bf16(randn({B, S, Hq, D}, seed), bf), k = round_bf16(randn({B, S, Hkv, D}, seed + 1), bf);
  const Tensor v = round_bf16(randn({B, S, Hkv, D}, seed + 2), bf);
  const Tensor dout = round_bf16(randn({B, S, Hq, D}, seed + 3), bf);
  const float scale = float(1.0 / std::sqrt(double(D)));
  auto forward = [=](const std::string& var) {
    Tensor o = Tensor::empty(q.shape(), DType::F32), l = Tensor::empty({B, Hq, S}, DType::F32);
    kernel<K>(var).forward(ExecContext::host(), q, k, v, scale, o, l, seg.empty() ? nullptr : seg.data());
    return Outs{o, l};
  };
  auto backward = [=](const std::string& var, const Outs& ol) {
    Tensor dq = Tensor::empty(q.shape(), DType::F32), dk = Tensor::empty(k.shape(), DType::F32),
           dv = Tensor::empty(k.shape(), DType::F32);
    kernel<K>(var).backward(ExecContext::host(), q, k, v, ol[0], ol[1], dout, scale, dq, dk, dv,
                            seg.empty() ? nullptr : seg.data());
    return Outs{dq, dk, dv};
  };
  const Outs saved = forward("reference");  // the o and lse both backward sides use
  CaseBody b;
  b.checks.push_back({.direction = "forward", .run = forward});
  b.checks.push_back({.direction = "backward", .run = [=](const std::string& var) { return backward(var, saved); }});
  if (!bf)
    b.fd = FdCheck{.inputs = {q, k, v},
                   .loss = [=] { return dot(forward("reference")[0], dout); },
                   .grads = [=] { return backward("reference", forward("reference")); }};
  return b;
}

}  // namespace

void cases_attention(std::vector<KernelCase>& t) {
  using K = AttentionKernel;
  const int64_t shapes[][5] = {{1, 1, 1, 1, 4}, {2, 7, 4, 2, 16}, {1, 65, 4, 1, 8}, {1, 130, 2, 2, 64}};
  for (bool bf : {false, true})
    for (const auto& s : shapes) {
      const int64_t B = s[0], S = s[1], Hq = s[2], Hkv = s[3], D = s[4];
      const std::string sh = dims({{"B", B}, {"S", S}, {"Hq", Hq}, {"Hkv", Hkv}, {"D", D}});
      t.push_back(make_case<K>(sh, bf, [=] { return attention_body(B, S, Hq, Hkv, D, bf, 21, {}); }, !bf));
    }
  // Row views: q, k, v as the columns of one fused [B * S, Q + 2K] buffer (as the model's qkv
  // projection output), dq, dk, dv written into the columns of another.
  const int64_t views[][5] = {{2, 7, 4, 2, 16}, {1, 70, 2, 1, 8}};
  for (bool bf : {false, true})
    for (const auto& s : views) {
      const int64_t B = s[0], S = s[1], Hq = s[2], Hkv = s[3], D = s[4];
      const std::string sh = "view:" + dims({{"B", B}, {"S", S}, {"Hq", Hq}, {"Hkv", Hkv}, {"D", D}});
      t.push_back(make_case<K>(sh, bf, [=] {
        const int64_t Q = Hq * D, Kw = Hkv * D, W = Q + 2 * Kw;
        const Tensor qkv = round_bf16(randn({B * S, W}, 38), bf), dout = round_bf16(randn({B, S, Hq, D}, 39), bf);
        const Tensor g0 = randn({B * S, W}, 40);
        const RowView q = RowView::columns(qkv, 0, Hq, D), k = RowView::columns(qkv, Q, Hkv, D),
                      v = RowView::columns(qkv, Q + Kw, Hkv, D);
        const float scale = float(1.0 / std::sqrt(double(D)));
        auto forward = [=](const std::string& var) {
          Tensor o = Tensor::empty({B, S, Hq, D}, DType::F32), l = Tensor::empty({B, Hq, S}, DType::F32);
          kernel<K>(var).forward_rows(ExecContext::host(), q, k, v, S, scale, o, l);
          return Outs{o, l};
        };
        const Outs saved = forward("reference");
        CaseBody b;
        b.checks.push_back({.direction = "forward", .run = forward});
        b.checks.push_back({.direction = "backward", .run = [=](const std::string& var) {
                              Tensor g = g0.clone();
                              kernel<K>(var).backward_rows(ExecContext::host(), q, k, v, saved[0], saved[1], dout, S,
                                                           scale, RowView::columns(g, 0, Hq, D),
                                                           RowView::columns(g, Q, Hkv, D),
                                                           RowView::columns(g, Q + Kw, Hkv, D));
                              return Outs{g};
                            }});
        return b;
      }));
    }
  // Block-causal: packed documents of lengths 1, 63, 9, 57 in one sequence and one whole
  // sequence in the other, each token seeing only its own document's prefix.
  for (bool bf : {false, true}) {
    const int64_t B = 2, S = 130, Hq = 4, Hkv = 2, D = 16;
    const std::string sh = "block_causal:" + dims({{"B", B}, {"S", S}, {"Hq", Hq}, {"Hkv", Hkv}, {"D", D}});
    t.push_back(make_case<K>(sh, bf, [=] {
      std::vector<int64_t> seg;
      for (int64_t n : {1, 63, 9, 57})
        for (int64_t i = 0, a = int64_t(seg.size()); i < n; ++i) seg.push_back(a);
      for (int64_t i = 0; i < S; ++i) seg.push_back(0);
      return attention_body(B, S, Hq, Hkv, D, bf, 41, seg);
    }, !bf));
  }
}

namespace {

// SwiGLU forward and backward in f32 (and with bf16 outputs for the bf16 cases).
CaseBody swiglu_body(const Tensor& gu, const Tensor& dout, bool bf, Bound bound, bool fd) {
  using K = SwiGLUKernel;
  const int64_t N = gu.dim(0), I = gu.dim(1) / 2;
  auto forward = [=](DType dt) {
    return [=](const std::string& v) {
      Tensor y = Tensor::empty({N, I}, dt);
      kernel<K>(v).forward(ExecContext::host(), gu, y);
      return Outs{y};
    };
  };
  auto backward = [=](DType dt) {
    return [=](const std::string& v) {
      Tensor d = Tensor::empty(gu.shape(), dt);
      kernel<K>(v).backward(ExecContext::host(), gu, dout, d);
      return Outs{d};
    };
  };
  CaseBody b;
  b.checks.push_back({.direction = "forward", .run = forward(DType::F32), .bounds = {bound}});
  b.checks.push_back({.direction = "backward", .run = backward(DType::F32), .bounds = {bound}});
  if (bf) {  // BF16 outputs (the inputs of the bf16 GEMMs after it): within one bf16 rounding.
    b.checks.push_back({"forward", ",out=bf16", forward(DType::BF16), kTolBf16Compute});
    b.checks.push_back({"backward", ",dgu=bf16", backward(DType::BF16), kTolBf16Compute});
  }
  if (fd)
    b.fd = FdCheck{.inputs = {gu},
                   .loss = [=] { return dot(forward(DType::F32)("reference")[0], dout); },
                   .grads = [=] { return backward(DType::F32)("reference"); },
                   .eps = 1e-3};
  return b;
}

}  // namespace

void cases_swiglu(std::vector<KernelCase>& t) {
  using K = SwiGLUKernel;
  const int64_t shapes[][2] = {{1, 1}, {7, 13}, {33, 100}};  // N, I
  for (bool bf : {false, true})
    for (const auto& s : shapes) {
      const int64_t N = s[0], I = s[1];
      t.push_back(make_case<K>(dims({{"N", N}, {"I", I}}), bf, [=] {
        return swiglu_body(round_bf16(randn({N, 2 * I}, 25, 3.0), bf), round_bf16(randn({N, I}, 26), bf), bf, Bound{},
                           !bf);
      }, !bf));
    }
  for (int64_t N : {1, 3, 17, 129})
    for (int64_t I : {1, 7, 33, 1000})
      t.push_back(make_case<K>(dims({{"N", N}, {"I", I}}) + ",threads", false, [=] {
        Tensor gu = randn({N, 2 * I}, uint64_t(N * 31 + I), 3.0);
        if (N == 129 && I == 1000) {  // the extremes of the exp range, both signs
          gu.data<float>()[0] = -120.f;
          gu.data<float>()[1] = 120.f;
          gu.data<float>()[2] = -87.4f;
        }
        return swiglu_body(gu, randn({N, I}, uint64_t(N + I)), false, Bound{1e-6, 1e-6}, false);
      }, false, true));
}

void cases_cross_entropy(std::vector<KernelCase>& t) {
  using K = CrossEntropyKernel;
  const int64_t shapes[][3] = {{1, 4, 3}, {7, 16, 37}, {33, 24, 300}, {9, 40, 4099}};  // N, H, V
  for (bool bf : {false, true})
    for (const auto& s : shapes) {
      const int64_t N = s[0], H = s[1], V = s[2];
      t.push_back(make_case<K>(dims({{"N", N}, {"H", H}, {"V", V}}), bf, [=] {
        const DType c = bf ? DType::BF16 : DType::F32;
        const double tol = bf ? kTolBf16Compute : kTolF32;
        const Tensor h = randn({N, H}, 27), w = randn({V, H}, 28, 0.3), dw0 = randn({V, H}, 29, 0.01);
        Tensor labels = Tensor::empty({N}, DType::I64);
        for (int64_t n = 0; n < N; ++n) labels.data<int64_t>()[n] = (n % 4 == 3) ? kIgnoreIndex : (n * 13 + 5) % V;
        auto fwd_bwd = [=](const std::string& v, Tensor& dh, Tensor& dw) {
          return kernel<K>(v).forward_backward(ExecContext::host(), h, w, labels, 0.25f, dh, dw, c);
        };
        CaseBody b;
        b.checks.push_back({.direction = "forward",
                            .run =
                                [=](const std::string& v) {
                                  Tensor lg = Tensor::empty({N, V}, DType::F32);
                                  kernel<K>(v).forward(ExecContext::host(), h, w, labels, &lg, c);
                                  return Outs{lg};
                                },
                            .tol = tol,
                            .scalar =
                                [=](const std::string& v) {
                                  return kernel<K>(v).forward(ExecContext::host(), h, w, labels, nullptr, c);
                                }});
        b.checks.push_back({.direction = "backward",
                            .run = [=](const std::string& v) {
                              Tensor dh = Tensor::empty({N, H}, DType::F32), dw = dw0.clone();
                              fwd_bwd(v, dh, dw);
                              return Outs{dh, dw};
                            },
                            .tol = tol,
                            .scalar = [=](const std::string& v) {
                              Tensor dh = Tensor::empty({N, H}, DType::F32), dw = dw0.clone();
                              return fwd_bwd(v, dh, dw);
                            }});
        if (!bf)
          b.fd = FdCheck{
              .inputs = {h, w},
              .loss =
                  [=] { return 0.25 * kernel<K>("reference").forward(ExecContext::host(), h, w, labels, nullptr, c); },
              .grads =
                  [=] {
                    Tensor dh = Tensor::empty({N, H}, DType::F32), dw = Tensor::zeros({V, H}, DType::F32);
                    fwd_bwd("reference", dh, dw);
                    return Outs{dh, dw};
                  },
              .eps = 1e-3};
        return b;
      }, !bf));
    }
}

void cases_adamw(std::vector<KernelCase>& t) {
  using K = AdamWKernel;
  for (bool bf : {false, true})
    for (int64_t n : {int64_t(1), int64_t(37), int64_t(4099)})
      t.push_back(make_case<K>(dims({{"N", n}}), bf, [=] {
        const Tensor p = round_bf16(randn({n}, 30), bf), g = round_bf16(randn({n}, 31), bf);
        const Tensor m = round_bf16(randn({n}, 32, 0.1), bf);
        Tensor v = round_bf16(randn({n}, 33, 0.1), bf);
        for (int64_t i = 0; i < n; ++i) v.data<float>()[i] = std::fabs(v.data<float>()[i]);
        CaseBody b;
        b.checks.push_back({.direction = "step", .run = [=](const std::string& var) {
                              AdamWParams hp;
                              hp.lr = 3e-3f, hp.weight_decay = 0.1f, hp.step = 7;
                              Tensor p1 = p.clone(), m1 = m.clone(), v1 = v.clone();
                              kernel<K>(var).step(ExecContext::host(), p1, g, m1, v1, hp);
                              return Outs{p1, m1, v1};
                            }});
        return b;
      }));
  // Four steps from zero moments, one with a tiny gradient, across thread counts.
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(33), int64_t(100003)})
    t.push_back(make_case<K>(dims({{"N", n}}) + ",steps=4,threads", false, [=] {
      const Tensor p0 = randn({n}, uint64_t(n));
      std::vector<Tensor> grads;
      for (int64_t s = 1; s <= 4; ++s) grads.push_back(randn({n}, uint64_t(100 * s + n), s == 3 ? 1e-3 : 1.0));
      CaseBody b;
      b.checks.push_back({.direction = "step",
                          .run = [=](const std::string& var) {
                            Tensor p = p0.clone(), m = Tensor::zeros({n}, DType::F32), v = Tensor::zeros({n}, DType::F32);
                            AdamWParams hp;
                            hp.lr = 1e-2f, hp.weight_decay = 0.1f, hp.beta2 = 0.95f;
                            for (int64_t s = 1; s <= 4; ++s) {
                              hp.step = s;
                              kernel<K>(var).step(ExecContext::host(), p, grads[size_t(s - 1)], m, v, hp);
                            }
                            return Outs{p, m, v};
                          },
                          .bounds = {{1e-6, 1e-6}, {1e-7, 1e-6}, {1e-9, 1e-6}}});
      return b;
    }, false, true));
}

void cases_moe(std::vector<KernelCase>& t) {
  using K = MoEKernel;
  // bias: an expert bias that never picks expert 0 and favours expert 1 (uneven groups, an expert
  // with no tokens), with a dlogits_extra gradient (the aux loss's) in the backward.
  struct S {
    int64_t T, H, E, I, K;
    bool norm, bias = false;
  } shapes[] = {{1, 8, 4, 4, 1, true},    {7, 13, 5, 9, 2, true},        {33, 17, 9, 11, 3, false},
                {40, 24, 16, 6, 4, true}, {19, 12, 6, 5, 2, true, true}, {26, 9, 7, 6, 5, false, true}};
  for (bool bf : {false, true})
    for (const S& s : shapes) {
      std::string sh = dims({{"T", s.T}, {"H", s.H}, {"E", s.E}, {"I", s.I}, {"K", s.K}, {"norm", s.norm}});
      if (s.bias) sh += ",bias,dlogits_extra";
      t.push_back(make_case<K>(sh, bf, [=] {
        const Tensor x = randn({s.T, s.H}, 34), router = randn({s.E, s.H}, 35, 0.5);
        const Tensor gate_up = randn({s.E, 2 * s.I, s.H}, 36, 0.3), down = randn({s.E, s.H, s.I}, 37, 0.3);
        const Tensor dy = randn({s.T, s.H}, 38);
        Tensor bias_t, extra;
        if (s.bias) {
          bias_t = randn({s.E}, 39, 0.01);
          bias_t.data<float>()[0] = -2.f, bias_t.data<float>()[1] = 0.5f;
          extra = randn({s.T, s.E}, 40, 0.1);
        }
        const double tol = bf ? kTolBf16Compute : kTolF32;
        auto args = [=] {
          MoEArgs a;
          a.x = &x, a.router = &router, a.gate_up = &gate_up, a.down = &down, a.top_k = s.K, a.norm_topk_prob = s.norm;
          a.bias = s.bias ? &bias_t : nullptr;
          a.compute = bf ? DType::BF16 : DType::F32;
          return a;
        };
        auto forward = [=](const std::string& v, MoESaved& saved) {
          Tensor y = Tensor::empty({s.T, s.H}, DType::F32);
          kernel<K>(v).forward(ExecContext::host(), args(), y, saved);
          return y;
        };
        // Backward after the same variant's forward (its saved state is variant-private).
        auto backward = [=](const std::string& v) {
          MoESaved saved;
          forward(v, saved);
          Tensor dx = Tensor::empty(x.shape(), DType::F32), dr = Tensor::zeros(router.shape(), DType::F32);
          Tensor dg = Tensor::zeros(gate_up.shape(), DType::F32), dd = Tensor::zeros(down.shape(), DType::F32);
          MoEGrads g;
          g.dx = &dx, g.drouter = &dr, g.dgate_up = &dg, g.ddown = &dd;
          g.dlogits_extra = s.bias ? &extra : nullptr;
          kernel<K>(v).backward(ExecContext::host(), args(), saved, dy, g);
          return Outs{dx, dr, dg, dd};
        };
        CaseBody b;
        // y, the router logits, and the chosen experts (a different choice fails the row).
        b.checks.push_back({.direction = "forward",
                            .run = [=](const std::string& v) {
                              MoESaved saved;
                              Tensor y = forward(v, saved);
                              return Outs{y, saved.logits, saved.topk_idx};
                            },
                            .tol = tol,
                            .bounds = {{}, {}, {0, 0}}});
        b.checks.push_back({.direction = "backward", .run = backward, .tol = tol});
        MoESaved routing;
        if (!bf) forward("reference", routing);
        if (!bf)
          b.fd = FdCheck{.inputs = {x, router, gate_up, down},
                         .loss =
                             [=] {  // with the bias rows' extra: + logits . extra
                               MoESaved saved;
                               const double l = dot(forward("reference", saved), dy);
                               return s.bias ? l + dot(saved.logits, extra) : l;
                             },
                         .grads = [=] { return backward("reference"); },
                         .eps = 1e-3,
                         .same_piece = [=] {  // the same experts chosen for every token
                           MoESaved now;
                           forward("reference", now);
                           return std::memcmp(now.topk_idx.raw(), routing.topk_idx.raw(), routing.topk_idx.nbytes()) == 0;
                         }};
        return b;
      }, !bf));
    }
}

}  // namespace titan::verify_detail
