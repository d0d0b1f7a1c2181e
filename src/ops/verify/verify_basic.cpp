// The cases of the element-wise and matmul op families (see verify.h): embedding, gemm, linear,
// rmsnorm, rope, residual, bias. The cases marked `threads` (odd row and column counts, thread
// independence, elementwise bounds) are the comparisons the cpu kernels were written against.
#include <algorithm>
#include <string>

#include "core/dtype.h"
#include "core/rng.h"
#include "ops/bias/bias.h"
#include "ops/embedding/embedding.h"
#include "ops/matmul/bf16_convert.h"
#include "ops/matmul/matmul.h"
#include "ops/residual/residual.h"
#include "ops/rmsnorm/rmsnorm.h"
#include "ops/rope/rope.h"
#include "ops/verify/verify.h"

// Checks and finite-difference checks are written with designated initializers; the fields left
// out keep their defaults on purpose (GCC 12 warns about them all the same).
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace titan::verify_detail {

namespace {

using Outs = std::vector<Tensor>;
const int64_t kRows[] = {1, 3, 17, 129};  // the thread-independence cases' row and column counts
const int64_t kCols[] = {1, 7, 33, 1000};

// n ids uniform in [0, V) (repeating when n > V).
Tensor uniform_ids(int64_t n, int64_t V, uint64_t stream, DType dt) {
  Tensor u = Tensor::empty({n}, DType::F32);
  fill_uniform(u, 0.0, double(V), Philox{20260101, stream});
  Tensor ids = Tensor::empty({n}, dt);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = std::min<int64_t>(V - 1, int64_t(u.data<float>()[i]));
    if (dt == DType::I32) ids.data<int32_t>()[i] = int32_t(id);
    else ids.data<int64_t>()[i] = id;
  }
  return ids;
}

}  // namespace

void cases_embedding(std::vector<KernelCase>& t) {
  using K = EmbeddingKernel;
  auto body = [](int64_t V, int64_t H, int64_t N, bool bf, Tensor ids, Bound bwd_bound, const char* exact) {
    const Tensor w = round_bf16(randn({V, H}, 1), bf), dout = round_bf16(randn({N, H}, 2), bf), g0 = randn({V, H}, 3);
    CaseBody b;
    b.checks.push_back({.direction = "forward",
                        .run = [=](const std::string& v) {
                          Tensor y = Tensor::empty({N, H}, DType::F32);
                          kernel<K>(v).forward(ExecContext::host(), ids, w, y);
                          return Outs{y};
                        },
                        .exact_variant = exact});
    b.checks.push_back({.direction = "backward",
                        .run = [=](const std::string& v) {
                          Tensor g = g0.clone();  // accumulated into
                          kernel<K>(v).backward(ExecContext::host(), ids, dout, g);
                          return Outs{g};
                        },
                        .bounds = {bwd_bound}});
    if (!bf)
      b.fd = FdCheck{.inputs = {w},
                     .loss = [=] {
                       Tensor y = Tensor::empty({N, H}, DType::F32);
                       kernel<K>("reference").forward(ExecContext::host(), ids, w, y);
                       return dot(y, dout);
                     },
                     .grads = [=] {
                       Tensor g = Tensor::zeros({V, H}, DType::F32);
                       kernel<K>("reference").backward(ExecContext::host(), ids, dout, g);
                       return Outs{g};
                     }};
    return b;
  };
  const int64_t shapes[][3] = {{1, 1, 1}, {11, 7, 5}, {64, 33, 40}};  // V, H, N
  for (bool bf : {false, true})
    for (const auto& s : shapes) {
      const int64_t V = s[0], H = s[1], N = s[2];
      t.push_back(make_case<K>(dims({{"V", V}, {"H", H}, {"N", N}}), bf, [=] {
        Tensor ids = Tensor::empty({N}, DType::I64);
        for (int64_t i = 0; i < N; ++i) ids.data<int64_t>()[i] = (i * 7 + 3) % V;  // repeats when N > V
        return body(V, H, N, bf, ids, Bound{}, "");
      }, !bf));
    }
  // Few rows (ids repeat), i32 ids for odd N: the cpu forward gathers the same bits.
  for (int64_t N : kRows)
    for (int64_t H : kCols) {
      const int64_t V = 5 + N / 3;
      const DType dt = N % 2 ? DType::I32 : DType::I64;
      const std::string sh = dims({{"V", V}, {"H", H}, {"N", N}}) + (N % 2 ? ",ids=i32" : "") + ",threads";
      t.push_back(make_case<K>(sh, false, [=] {
        return body(V, H, N, false, uniform_ids(N, V, uint64_t(N + H), dt), Bound{1e-5, 1e-5}, "cpu");
      }, false, true));
    }
}

void cases_gemm(std::vector<KernelCase>& t) {
  struct S {
    int64_t m, n, k;
    bool ta, tb;
    int64_t ldadd;  // > 0: with an addend R whose rows are ldadd apart (a residual input)
  } shapes[] = {{1, 1, 1, false, false, 0}, {7, 5, 13, false, true, 0}, {33, 17, 64, true, false, 0},
                {65, 31, 9, true, true, 0},  {7, 5, 13, false, true, 5}, {33, 17, 64, true, false, 20}};
  for (bool bf : {false, true})
    for (const S& s : shapes) {
      const std::string sh =
          dims({{"M", s.m}, {"N", s.n}, {"K", s.k}, {"ta", s.ta}, {"tb", s.tb}, {"ldadd", s.ldadd}});
      t.push_back(make_case<GemmKernel>(sh, bf, [=] {
        const Tensor A = randn({s.ta ? s.k : s.m, s.ta ? s.m : s.k}, 4), B = randn({s.tb ? s.n : s.k, s.tb ? s.k : s.n}, 5);
        const Tensor Ab = bf ? to_bf16(A) : A, Bb = bf ? to_bf16(B) : B;
        const Tensor C0 = randn({s.m, s.n}, 6), R = randn({s.m, std::max<int64_t>(s.ldadd, 1)}, 30);
        CaseBody b;
        b.checks.push_back({.direction = "forward",
                            .run = [=](const std::string& v) {
                              Tensor c = C0.clone();
                              GemmArgs g;
                              g.trans_a = s.ta, g.trans_b = s.tb, g.m = s.m, g.n = s.n, g.k = s.k, g.alpha = 0.75f,
                              g.beta = 0.5f;
                              g.a = Ab.raw(), g.b = Bb.raw(), g.c = c.data<float>();
                              g.in_dtype = bf ? DType::BF16 : DType::F32;
                              if (s.ldadd > 0) g.add = R.data<float>(), g.ldadd = s.ldadd;
                              gemm(ExecContext::host(), kernel<GemmKernel>(v), g);
                              return Outs{c};
                            },
                            .tol = bf ? kTolBf16Compute : kTolF32});
        return b;
      }));
    }
}

void cases_linear(std::vector<KernelCase>& t) {
  using K = LinearKernel;
  // M, K, N; M <= 4 with odd K and N: the decode GEMV path (gemv.h) of the cpu and gemv variants,
  // the last one large enough to be split over the threads.
  const int64_t shapes[][3] = {{1, 1, 1},   {7, 13, 5},   {33, 64, 17}, {70, 48, 96},
                               {1, 37, 19}, {2, 130, 67}, {3, 17, 33},  {4, 301, 1030}};
  for (bool bf : {false, true})
    for (const auto& s : shapes) {
      const int64_t M = s[0], Kd = s[1], N = s[2];
      t.push_back(make_case<K>(dims({{"M", M}, {"K", Kd}, {"N", N}}), bf, [=] {
        const DType c = bf ? DType::BF16 : DType::F32;
        const double tol = bf ? kTolBf16Compute : kTolF32;
        const Tensor x = randn({M, Kd}, 7), w = randn({N, Kd}, 8), dy = randn({M, N}, 9), dw0 = randn({N, Kd}, 10);
        const Tensor r = randn({M, N}, 31);  // y = x W^T + r (the residual input form)
        CaseBody b;
        b.checks.push_back({.direction = "forward",
                            .run = [=](const std::string& v) {
                              Tensor y = Tensor::empty({M, N}, DType::F32);
                              kernel<K>(v).forward(ExecContext::host(), x, w, y, c);
                              return Outs{y};
                            },
                            .tol = tol});
        b.checks.push_back({.direction = "forward",
                            .shape_suffix = ",residual",
                            .run = [=](const std::string& v) {
                              Tensor y = Tensor::empty({M, N}, DType::F32);
                              kernel<K>(v).forward_residual(ExecContext::host(), x, w, &r, y, c);
                              return Outs{y};
                            },
                            .tol = tol});
        b.checks.push_back({.direction = "backward",
                            .run = [=](const std::string& v) {
                              Tensor dx = Tensor::empty({M, Kd}, DType::F32), dw = dw0.clone();
                              kernel<K>(v).backward(ExecContext::host(), x, w, dy, &dx, &dw, c);
                              return Outs{dx, dw};
                            },
                            .tol = tol});
        if (!bf)
          b.fd = FdCheck{.inputs = {x, w},
                         .loss = [=] {
                           Tensor y = Tensor::empty({M, N}, DType::F32);
                           kernel<K>("reference").forward(ExecContext::host(), x, w, y, DType::F32);
                           return dot(y, dy);
                         },
                         .grads = [=] {
                           Tensor dx = Tensor::empty({M, Kd}, DType::F32), dw = Tensor::zeros({N, Kd}, DType::F32);
                           kernel<K>("reference").backward(ExecContext::host(), x, w, dy, &dx, &dw, DType::F32);
                           return Outs{dx, dw};
                         }};
        return b;
      }, !bf));
    }
}

namespace {

// RMSNorm forward (y, rstd) and backward (dx, dw accumulated into dw0) on [N, D] inputs.
CaseBody rmsnorm_body(const Tensor& x, const Tensor& w, const Tensor& dy, const Tensor& dw0, std::vector<Bound> fwd,
                      std::vector<Bound> bwd, bool fd) {
  using K = RMSNormKernel;
  const int64_t N = x.dim(0), D = x.dim(1);
  Tensor rstd = Tensor::empty({N}, DType::F32), y0 = Tensor::empty({N, D}, DType::F32);
  kernel<K>("reference").forward(ExecContext::host(), x, w, 1e-6f, y0, rstd);  // the saved rstd both backward sides use
  CaseBody b;
  b.checks.push_back({.direction = "forward",
                      .run = [=](const std::string& v) {
                        Tensor y = Tensor::empty({N, D}, DType::F32), r = Tensor::empty({N}, DType::F32);
                        kernel<K>(v).forward(ExecContext::host(), x, w, 1e-6f, y, r);
                        return Outs{y, r};
                      },
                      .bounds = fwd});
  b.checks.push_back({.direction = "backward",
                      .run = [=](const std::string& v) {
                        Tensor dx = Tensor::empty({N, D}, DType::F32), dw = dw0.clone();
                        kernel<K>(v).backward(ExecContext::host(), x, w, rstd, dy, dx, dw);
                        return Outs{dx, dw};
                      },
                      .bounds = bwd});
  if (fd)
    b.fd = FdCheck{.inputs = {x, w},
                   .loss = [=] {
                     Tensor y = Tensor::empty({N, D}, DType::F32), r = Tensor::empty({N}, DType::F32);
                     kernel<K>("reference").forward(ExecContext::host(), x, w, 1e-6f, y, r);
                     return dot(y, dy);
                   },
                   .grads = [=] {
                     Tensor y = Tensor::empty({N, D}, DType::F32), r = Tensor::empty({N}, DType::F32);
                     kernel<K>("reference").forward(ExecContext::host(), x, w, 1e-6f, y, r);
                     Tensor dx = Tensor::empty({N, D}, DType::F32), dw = Tensor::zeros({D}, DType::F32);
                     kernel<K>("reference").backward(ExecContext::host(), x, w, r, dy, dx, dw);
                     return Outs{dx, dw};
                   },
                   .eps = 1e-3};
  return b;
}

// The row-view forms: heads read from (and gradients written into) columns of a wider buffer, as
// the q/k norm does inside the fused qkv buffer; dx added into (backward_add); a bf16 y.
void cases_rmsnorm_views(std::vector<KernelCase>& t) {
  using K = RMSNormKernel;
  const int64_t shapes[][5] = {{5, 3, 16, 80, 8}, {33, 2, 64, 256, 64}, {7, 1, 13, 13, 0}};  // n, h, D, ld, c0
  for (bool bf : {false, true})
    for (const auto& s : shapes) {
      const int64_t n = s[0], h = s[1], D = s[2], ld = s[3], c0 = s[4];
      t.push_back(make_case<K>("view:" + dims({{"n", n}, {"h", h}, {"D", D}, {"ld", ld}}), bf, [=] {
        const Tensor buf = round_bf16(randn({n, ld}, 32), bf), w = round_bf16(randn({D}, 33), bf);
        const Tensor dy = round_bf16(randn({n, h, D}, 34), bf);
        const Tensor g0 = randn({n, ld}, 35), dw0 = randn({D}, 36);
        const RowView x = RowView::columns(buf, c0, h, D);
        Tensor rstd = Tensor::empty({n * h}, DType::F32), y0 = Tensor::empty({n, h, D}, DType::F32);
        kernel<K>("reference").forward_rows(ExecContext::host(), x, w, 1e-6f, RowView::of(y0, h, D), rstd);
        auto fwd = [=](DType yt) {
          return [=](const std::string& v) {
            Tensor y = Tensor::empty({n, h, D}, yt), r = Tensor::empty({n * h}, DType::F32);
            kernel<K>(v).forward_rows(ExecContext::host(), x, w, 1e-6f, RowView::of(y, h, D), r);
            return yt == DType::F32 ? Outs{y, r} : Outs{y};
          };
        };
        CaseBody b;
        b.checks.push_back({.direction = "forward", .run = fwd(DType::F32)});
        if (bf) b.checks.push_back({"forward", ",y=bf16", fwd(DType::BF16), kTolBf16Compute});
        // dx overwritten in place of its columns, then added into them
        for (bool acc : {false, true})
          b.checks.push_back({.direction = "backward",
                              .shape_suffix = acc ? ",dx+=" : "",
                              .run = [=](const std::string& v) {
                                Tensor g = g0.clone(), dw = dw0.clone();
                                kernel<K>(v).backward_rows(ExecContext::host(), x, w, rstd, RowView::of(dy, h, D),
                                                           RowView::columns(g, c0, h, D), dw, acc);
                                return Outs{g, dw};  // the columns outside the view must stay as they were
                              }});
        return b;
      }));
    }
}

}  // namespace

void cases_rmsnorm(std::vector<KernelCase>& t) {
  using K = RMSNormKernel;
  const int64_t shapes[][2] = {{1, 1}, {7, 13}, {33, 128}, {5, 1000}};  // N, D
  for (bool bf : {false, true})
    for (const auto& s : shapes) {
      const int64_t N = s[0], D = s[1];
      t.push_back(make_case<K>(dims({{"N", N}, {"D", D}}), bf, [=] {
        return rmsnorm_body(round_bf16(randn({N, D}, 11), bf), round_bf16(randn({D}, 12), bf),
                            round_bf16(randn({N, D}, 13), bf), randn({D}, 14), {}, {}, !bf);
      }, !bf));
    }
  cases_rmsnorm_views(t);
  for (int64_t N : kRows)
    for (int64_t D : kCols)
      t.push_back(make_case<K>(dims({{"N", N}, {"D", D}}) + ",threads", false, [=] {
        return rmsnorm_body(randn({N, D}, uint64_t(N * 1000 + D), 2.0, 0.3), randn({D}, uint64_t(D), 0.2, 1.0),
                            randn({N, D}, uint64_t(N + 5 * D)), randn({D}, 9), {{1e-6, 2e-6}, {0, 2e-6}},
                            {{1e-5, 1e-5}, {1e-4, 1e-5}}, false);
      }, false, true));
}

namespace {

// RoPE forward and backward (both in place) of x with the given cache; the fused variant computes
// every element with the reference's operations: bit-exact.
CaseBody rope_body(const Tensor& x, const RopeCache& cache, Bound bound, bool fd) {
  using K = RopeKernel;
  CaseBody b;
  for (bool fwd : {true, false})
    b.checks.push_back({.direction = fwd ? "forward" : "backward",
                        .run = [=](const std::string& v) {
                          Tensor y = x.clone();
                          if (fwd)
                            kernel<K>(v).forward(ExecContext::host(), y, cache);
                          else
                            kernel<K>(v).backward(ExecContext::host(), y, cache);
                          return Outs{y};
                        },
                        .exact_variant = "transposed",
                        .bounds = {bound}});
  if (fd) {
    const Tensor r = randn(x.shape(), 41);
    b.fd = FdCheck{.inputs = {x},
                   .loss = [=] {
                     Tensor y = x.clone();
                     kernel<K>("reference").forward(ExecContext::host(), y, cache);
                     return dot(y, r);
                   },
                   .grads = [=] {
                     Tensor g = r.clone();
                     kernel<K>("reference").backward(ExecContext::host(), g, cache);
                     return Outs{g};
                   }};
  }
  return b;
}

}  // namespace

void cases_rope(std::vector<KernelCase>& t) {
  using K = RopeKernel;
  const int64_t shapes[][5] = {{1, 1, 1, 1, 2}, {2, 7, 4, 2, 16}, {1, 33, 5, 1, 10}, {2, 64, 8, 4, 128}};
  for (bool bf : {false, true})
    for (const auto& s : shapes) {
      const int64_t B = s[0], S = s[1], Hq = s[2], Hkv = s[3], D = s[4];
      for (const auto& [name, H, stream] : {std::tuple{"q", Hq, 15}, std::tuple{"k", Hkv, 16}}) {
        const int64_t h = H;
        const uint64_t st = uint64_t(stream);
        t.push_back(make_case<K>(std::string(name) + ":" + dims({{"B", B}, {"S", S}, {"H", h}, {"D", D}}), bf, [=] {
          return rope_body(round_bf16(randn({B, S, h, D}, st, 2.0), bf), make_rope_cache(1000000.0, D, S + 5), Bound{},
                           !bf);
        }, !bf));
      }
    }
  // Row views: the k heads of a fused [B * S, ld] buffer, rotated in place, from position `start`.
  const int64_t views[][7] = {{2, 7, 2, 16, 96, 32, 3}, {1, 33, 1, 10, 40, 20, 0}};  // B, S, H, D, ld, c0, start
  for (bool bf : {false, true})
    for (const auto& w : views) {
      const int64_t B = w[0], S = w[1], H = w[2], D = w[3], ld = w[4], c0 = w[5], start = w[6];
      const std::string sh = "view:" + dims({{"B", B}, {"S", S}, {"H", H}, {"D", D}, {"ld", ld}, {"start", start}});
      t.push_back(make_case<K>(sh, bf, [=] {
        const RopeCache cache = make_rope_cache(1000000.0, D, start + S);
        const Tensor buf = round_bf16(randn({B * S, ld}, 37, 2.0), bf);
        CaseBody b;
        for (bool fwd : {true, false})
          b.checks.push_back({.direction = fwd ? "forward" : "backward",
                              .run = [=](const std::string& v) {
                                Tensor a = buf.clone();
                                const RowView va = RowView::columns(a, c0, H, D);
                                if (fwd)
                                  kernel<K>(v).forward_rows(ExecContext::host(), va, S, start, cache);
                                else
                                  kernel<K>(v).backward_rows(ExecContext::host(), va, S, start, cache);
                                return Outs{a};
                              },
                              .exact_variant = "transposed"});
        return b;
      }));
    }
  struct C {
    int64_t b, s, h, d;
  };
  for (C c : {C{1, 1, 1, 2}, C{2, 3, 3, 6}, C{1, 17, 2, 64}, C{3, 129, 5, 34}, C{1, 40, 4, 128}})
    t.push_back(make_case<K>(dims({{"B", c.b}, {"S", c.s}, {"H", c.h}, {"D", c.d}}) + ",threads", false, [=] {
      return rope_body(randn({c.b, c.s, c.h, c.d}, uint64_t(c.s * 10 + c.d)), make_rope_cache(1e6, c.d, c.s + 3),
                       Bound{1e-6, 1e-6}, false);
    }, false, true));
  // Both theta values of the Qwen3 configs, wider inputs (std 3).
  uint64_t stream = 42;
  for (C c : {C{1, 1, 1, 2}, C{2, 7, 3, 16}, C{1, 33, 5, 10}, C{3, 5, 2, 128}, C{2, 70, 4, 64}})
    for (int64_t theta : {int64_t(10000), int64_t(1000000)}) {
      const uint64_t st = stream++;
      const std::string sh = dims({{"B", c.b}, {"S", c.s}, {"H", c.h}, {"D", c.d}, {"theta", theta}}) + ",threads";
      t.push_back(make_case<K>(sh, false, [=] {
        return rope_body(randn({c.b, c.s, c.h, c.d}, st, 3.0), make_rope_cache(double(theta), c.d, c.s + 3), Bound{},
                         false);
      }, false, true));
    }
}

void cases_residual(std::vector<KernelCase>& t) {
  using K = ResidualKernel;
  auto body = [](const Tensor& a, const Tensor& bb, const char* exact) {
    CaseBody b;
    b.checks.push_back({.direction = "forward",
                        .run = [=](const std::string& v) {
                          Tensor y = Tensor::empty(a.shape(), DType::F32);
                          kernel<K>(v).forward(ExecContext::host(), a, bb, y);
                          return Outs{y};
                        },
                        .exact_variant = exact});
    b.checks.push_back({.direction = "backward",
                        .run = [=](const std::string& v) {
                          Tensor d = a.clone();
                          kernel<K>(v).accumulate(ExecContext::host(), d, bb);
                          return Outs{d};
                        },
                        .exact_variant = exact});
    return b;
  };
  const int64_t shapes[][2] = {{1, 1}, {7, 13}, {33, 1000}};
  for (bool bf : {false, true})
    for (const auto& s : shapes) {
      const int64_t N = s[0], D = s[1];
      t.push_back(make_case<K>(dims({{"N", N}, {"D", D}}), bf, [=] {
        return body(round_bf16(randn({N, D}, 17), bf), round_bf16(randn({N, D}, 18), bf), "");
      }));
    }
  // One-dimensional, up to 100003 elements: the cpu kernel adds the same bits.
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(1000), int64_t(100003)})
    t.push_back(make_case<K>(dims({{"n", n}}), false,
                             [=] { return body(randn({n}, uint64_t(n)), randn({n}, uint64_t(n + 1)), "cpu"); }));
}

// Bias add (Qwen2's q/k/v projection biases): y += b in place; db += column sums of dy.
void cases_bias(std::vector<KernelCase>& t) {
  using K = BiasKernel;
  const int64_t shapes[][2] = {{1, 1}, {7, 13}, {70, 96}, {300, 65}};  // M, N
  for (bool bf : {false, true})
    for (const auto& s : shapes) {
      const int64_t M = s[0], N = s[1];
      t.push_back(make_case<K>(dims({{"M", M}, {"N", N}}), bf, [=] {
        const Tensor y = round_bf16(randn({M, N}, 32), bf), bb = round_bf16(randn({N}, 33), bf);
        const Tensor dy = randn({M, N}, 34), db0 = randn({N}, 35);
        CaseBody b;
        b.checks.push_back({.direction = "forward", .run = [=](const std::string& v) {
                              Tensor z = y.clone();
                              kernel<K>(v).forward(ExecContext::host(), z, bb);
                              return Outs{z};
                            }});
        b.checks.push_back({.direction = "backward", .run = [=](const std::string& v) {
                              Tensor db = db0.clone();  // accumulates into an existing gradient
                              kernel<K>(v).backward(ExecContext::host(), dy, db);
                              return Outs{db};
                            }});
        if (!bf)
          b.fd = FdCheck{.inputs = {y, bb},
                         .loss = [=] {
                           Tensor z = y.clone();
                           kernel<K>("reference").forward(ExecContext::host(), z, bb);
                           return dot(z, dy);
                         },
                         .grads = [=] {
                           Tensor db = Tensor::zeros({N}, DType::F32);
                           kernel<K>("reference").backward(ExecContext::host(), dy, db);
                           return Outs{dy.clone(), db};
                         }};
        return b;
      }, !bf));
    }
}

}  // namespace titan::verify_detail
