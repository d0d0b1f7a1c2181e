// The gated delta rule, cpu variant: the chunked form in f32 (gated_delta.h, docs/qwen3_5.md).
//
// Per value head and chunk of C tokens entering with state S0 [dk, dv] (positions i, j in the chunk):
//   gam_i = g_1 + .. + g_i (within the chunk), G_i = exp(gam_i), D_ij = exp(gam_i - gam_j) (j <= i)
//   A_ij = beta_i D_ij k_i.k_j (j < i),  R_i = beta_i (v_i - G_i S0^T k_i)
//   U = (I + A)^-1 R  (forward substitution: the deltas of the chunk's tokens)
//   O_i = G_i S0^T q_i + sum_{j <= i} D_ij (q_i.k_j) U_j
//   S_end = G_L S0 + sum_i exp(gam_L - gam_i) k_i U_i^T
// which is the token recurrence regrouped (transformers' torch_chunk_gated_delta_rule computes the
// same U as T (beta V) - T (beta G K) S0 with T = (I + A)^-1 formed explicitly). The backward runs
// the chunks in reverse (their entering states recomputed by a forward pass over states only), with
// X = (I + A)^-T dU by back substitution and dA_ij = -X_i . U_j; documents (seg) are runs of chunks
// of their own, each from state zero.
//
// Work is split over (row, value head) pairs; key-head gradients of a GQA group are summed from
// per-value-head buffers in head order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/threading.h"
#include "ops/gated_delta/gated_delta.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

using gated_delta::Dims;
constexpr float kNormEps = 1e-6f;

inline float dotf(const float* __restrict a, const float* __restrict b, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
inline void axpy(float a, const float* __restrict x, float* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// x^ = scale x r per token and key head, r = 1 / sqrt(|x|^2 + eps) (or 1): y [B*S*Hk, d], r [B*S*Hk].
void normalise(const Tensor& x, int64_t n, int64_t d, float scale, bool l2, std::vector<float>& y,
               std::vector<float>& r) {
  y.resize(size_t(n * d));
  r.resize(static_cast<size_t>(n));
  const float* p = x.data<float>();
  parallel_for(n, 256, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float ri = l2 ? 1.0f / std::sqrt(dotf(p + i * d, p + i * d, d) + kNormEps) : 1.0f;
      r[size_t(i)] = ri;
      for (int64_t j = 0; j < d; ++j) y[size_t(i * d + j)] = p[i * d + j] * ri * scale;
    }
  });
}

// The documents [a, e) of row b.
template <class F>
void for_documents(const int64_t* seg, const Dims& d, int64_t b, F&& f) {
  for (int64_t a = 0; a < d.S;) {
    int64_t e = a + 1;
    while (e < d.S && !(seg && seg[b * d.S + e] == e)) ++e;
    f(a, e);
    a = e;
  }
}

// One (row, value head): its token data as strided pointers.
struct Head {
  const float *q, *k, *v, *g, *beta;  // q, k: normalised; rows lq, lk, lv, lh apart
  int64_t lq, lv, lh;
  int64_t DK, DV;
};

// Scratch of one chunk.
struct Chunk {
  std::vector<float> gam, G, KK, QK, U, KS;  // [C], [C], [C, C], [C, C], [C, DV], [C, DV]
  void size(int64_t C, int64_t DV) {
    gam.resize(static_cast<size_t>(C)), G.resize(static_cast<size_t>(C)), KK.resize(size_t(C * C)), QK.resize(size_t(C * C));
    U.resize(size_t(C * DV)), KS.resize(size_t(C * DV));
  }
};

// The forward quantities of the chunk [t0, t0 + C) from S0: gam, G, KK (A, lower), QK (P, lower
// incl. diagonal, with the decay folded in), KS = S0^T k, U. A is kept in KK's strict lower part
// as A_ij, P in QK.
void chunk_forward(const Head& h, int64_t t0, int64_t C, const float* S0, Chunk& c) {
  const int64_t DK = h.DK, DV = h.DV;
  float acc = 0;
  for (int64_t i = 0; i < C; ++i) {
    acc += h.g[(t0 + i) * h.lh];
    c.gam[size_t(i)] = acc;
    c.G[size_t(i)] = std::exp(acc);
  }
  for (int64_t i = 0; i < C; ++i) {
    const float* ki = h.k + (t0 + i) * h.lq;
    const float* qi = h.q + (t0 + i) * h.lq;
    const float bi = h.beta[(t0 + i) * h.lh];
    for (int64_t j = 0; j <= i; ++j) {
      const float* kj = h.k + (t0 + j) * h.lq;
      const float dij = std::exp(c.gam[size_t(i)] - c.gam[size_t(j)]);
      c.KK[size_t(i * C + j)] = j < i ? bi * dij * dotf(ki, kj, DK) : 0.0f;
      c.QK[size_t(i * C + j)] = dij * dotf(qi, kj, DK);
    }
  }
  for (int64_t i = 0; i < C; ++i) {  // KS_i = S0^T k_i, R_i, then U_i = R_i - sum_j A_ij U_j
    float* ks = c.KS.data() + i * DV;
    std::fill(ks, ks + DV, 0.0f);
    const float* ki = h.k + (t0 + i) * h.lq;
    for (int64_t m = 0; m < DK; ++m) axpy(ki[m], S0 + m * DV, ks, DV);
    const float bi = h.beta[(t0 + i) * h.lh], Gi = c.G[size_t(i)];
    const float* vi = h.v + (t0 + i) * h.lv;
    float* ui = c.U.data() + i * DV;
    for (int64_t j = 0; j < DV; ++j) ui[j] = bi * (vi[j] - Gi * ks[j]);
    for (int64_t j = 0; j < i; ++j) axpy(-c.KK[size_t(i * C + j)], c.U.data() + j * DV, ui, DV);
  }
}

// S <- S_end of the chunk (S == S0 on entry).
void chunk_state(const Head& h, int64_t t0, int64_t C, const Chunk& c, float* S) {
  const int64_t DK = h.DK, DV = h.DV;
  const float GL = c.G[size_t(C - 1)];
  for (int64_t m = 0; m < DK * DV; ++m) S[m] *= GL;
  for (int64_t i = 0; i < C; ++i) {
    const float e = std::exp(c.gam[size_t(C - 1)] - c.gam[size_t(i)]);
    const float* ki = h.k + (t0 + i) * h.lq;
    const float* ui = c.U.data() + i * DV;
    for (int64_t m = 0; m < DK; ++m) axpy(e * ki[m], ui, S + m * DV, DV);
  }
}

void head_forward(const Head& h, const int64_t* seg, const Dims& d, int64_t b, const float* init, int64_t chunk,
                  float* out, int64_t lo, float* fin) {
  const int64_t DK = h.DK, DV = h.DV;
  std::vector<float> S(size_t(DK * DV));
  Chunk c;
  c.size(chunk, DV);
  bool first = true;
  for_documents(seg, d, b, [&](int64_t a, int64_t e) {
    if (first && init) std::copy(init, init + DK * DV, S.begin());
    else std::fill(S.begin(), S.end(), 0.0f);
    first = false;
    for (int64_t t0 = a; t0 < e; t0 += chunk) {
      const int64_t C = std::min(chunk, e - t0);
      chunk_forward(h, t0, C, S.data(), c);
      for (int64_t i = 0; i < C; ++i) {
        float* o = out + (t0 + i) * lo;
        std::fill(o, o + DV, 0.0f);
        const float* qi = h.q + (t0 + i) * h.lq;
        const float Gi = c.G[size_t(i)];
        for (int64_t m = 0; m < DK; ++m) axpy(Gi * qi[m], S.data() + m * DV, o, DV);
        for (int64_t j = 0; j <= i; ++j) axpy(c.QK[size_t(i * C + j)], c.U.data() + j * DV, o, DV);
      }
      chunk_state(h, t0, C, c, S.data());
    }
  });
  if (fin) std::copy(S.begin(), S.end(), fin);
}

Head head_of(const std::vector<float>& qn, const std::vector<float>& kn, const Tensor& v, const Tensor& g,
             const Tensor& beta, const Dims& d, int64_t b, int64_t hv) {
  const int64_t hk = hv / (d.Hv / d.Hk);
  Head h;
  h.q = qn.data() + (b * d.S * d.Hk + hk) * d.dk;
  h.k = kn.data() + (b * d.S * d.Hk + hk) * d.dk;
  h.v = v.data<float>() + (b * d.S * d.Hv + hv) * d.dv;
  h.g = g.data<float>() + b * d.S * d.Hv + hv;
  h.beta = beta.data<float>() + b * d.S * d.Hv + hv;
  h.lq = d.Hk * d.dk, h.lv = d.Hv * d.dv, h.lh = d.Hv, h.DK = d.dk, h.DV = d.dv;
  return h;
}

void forward(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
             const Tensor& beta, const int64_t* seg, const Tensor& init, const GatedDeltaOptions& o, Tensor& out,
             Tensor& fin) {
  opcheck::host_context(ctx, "gated_delta.cpu");
  const Dims d = gated_delta::check_forward(q, k, v, g, beta, seg, init, out, fin, "gated_delta.cpu forward");
  TITAN_CHECK(o.chunk >= 1, "gated_delta.cpu forward: chunk must be >= 1, got ", o.chunk);
  std::vector<float> qn, kn, rq, rk;
  normalise(q, d.B * d.S * d.Hk, d.dk, gated_delta::scale_of(o, d.dk), o.l2norm, qn, rq);
  normalise(k, d.B * d.S * d.Hk, d.dk, 1.0f, o.l2norm, kn, rk);
  const int64_t SS = d.dk * d.dv;
  parallel_for(d.B * d.Hv, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / d.Hv, hv = p % d.Hv;
      head_forward(head_of(qn, kn, v, g, beta, d, b, hv), seg, d, b,
                   init.defined() ? init.data<float>() + p * SS : nullptr, o.chunk,
                   out.data<float>() + (b * d.S * d.Hv + hv) * d.dv, d.Hv * d.dv,
                   fin.defined() ? fin.data<float>() + p * SS : nullptr);
    }
  });
}

// Gradients of one (row, value head): dq^, dk^ into rows of [S, dk] buffers (stride lq), dv, dg, dbeta
// at the head's strides; dinit (may be null).
struct HeadGrads {
  float *dq, *dk, *dv, *dg, *db;
  int64_t lq, lv, lh;
};

void chunk_backward(const Head& h, int64_t t0, int64_t C, const float* S0, const Chunk& c, const float* dO, int64_t lo,
                    float* dS, const HeadGrads& gr, std::vector<float>& scratch) {
  const int64_t DK = h.DK, DV = h.DV;
  scratch.resize(size_t(2 * C * DV + C + 2 * DK * DV + C * C));
  float* dU = scratch.data();             // [C, DV], then X in place
  float* dKS = dU + C * DV;               // [C, DV]
  float* dgam = dKS + C * DV;             // [C]
  float* dS0 = dgam + C;                  // [DK, DV]
  float* dSk = dS0 + DK * DV;             // unused spare
  float* dP = dSk + DK * DV;              // [C, C] (then the decay-log gradients)
  (void)dSk;
  std::fill(dgam, dgam + C, 0.0f);
  const int64_t L = C - 1;
  const float GL = c.G[size_t(L)];
  // S_end = G_L S0 + sum_i e_i k_i U_i^T
  double dGL = 0;
  for (int64_t m = 0; m < DK * DV; ++m) {
    dS0[m] = GL * dS[m];
    dGL += double(S0[m]) * dS[m];
  }
  dgam[L] += float(dGL) * GL;
  for (int64_t i = 0; i < C; ++i) {
    const float e = std::exp(c.gam[size_t(L)] - c.gam[size_t(i)]);
    const float* ki = h.k + (t0 + i) * h.lq;
    const float* ui = c.U.data() + i * DV;
    float* du = dU + i * DV;
    std::fill(du, du + DV, 0.0f);
    for (int64_t m = 0; m < DK; ++m) axpy(ki[m], dS + m * DV, du, DV);  // dS^T k_i
    const float de = dotf(du, ui, DV);                                     // (k_i^T dS) . U_i
    float* dki = gr.dk + (t0 + i) * gr.lq;
    for (int64_t m = 0; m < DK; ++m) dki[m] += e * dotf(dS + m * DV, ui, DV);
    for (int64_t j = 0; j < DV; ++j) du[j] *= e;
    dgam[L] += e * de;
    dgam[i] -= e * de;
  }
  // O_i = G_i S0^T q_i + sum_j P_ij U_j
  for (int64_t i = 0; i < C; ++i) {
    const float* doi = dO + (t0 + i) * lo;
    const float* qi = h.q + (t0 + i) * h.lq;
    const float Gi = c.G[size_t(i)];
    float* dqi = gr.dq + (t0 + i) * gr.lq;
    float s = 0;
    for (int64_t m = 0; m < DK; ++m) {
      const float sd = dotf(S0 + m * DV, doi, DV);  // (S0 dO_i)_m
      dqi[m] += Gi * sd;
      s += qi[m] * sd;
      axpy(Gi * qi[m], doi, dS0 + m * DV, DV);
    }
    dgam[i] += Gi * s;
    for (int64_t j = 0; j <= i; ++j) {
      const float pij = c.QK[size_t(i * C + j)];
      axpy(pij, doi, dU + j * DV, DV);
      dP[i * C + j] = dotf(doi, c.U.data() + j * DV, DV);
    }
  }
  // P_ij = D_ij q_i.k_j: dq, dk, and the decay logs
  for (int64_t i = 0; i < C; ++i) {
    const float* qi = h.q + (t0 + i) * h.lq;
    const float* ki = h.k + (t0 + i) * h.lq;
    float* dqi = gr.dq + (t0 + i) * gr.lq;
    for (int64_t j = 0; j <= i; ++j) {
      const float dij = std::exp(c.gam[size_t(i)] - c.gam[size_t(j)]);
      const float w = dP[i * C + j] * dij;
      const float* kj = h.k + (t0 + j) * h.lq;
      axpy(w, kj, dqi, DK);
      axpy(w, qi, gr.dk + (t0 + j) * gr.lq, DK);
      const float dl = dP[i * C + j] * c.QK[size_t(i * C + j)];
      dgam[i] += dl;
      dgam[j] -= dl;
    }
    (void)ki;
  }
  // X = (I + A)^-T dU (back substitution, in place in dU)
  for (int64_t i = C - 1; i >= 0; --i)
    for (int64_t j = i + 1; j < C; ++j) axpy(-c.KK[size_t(j * C + i)], dU + j * DV, dU + i * DV, DV);
  const float* X = dU;
  // dA_ij = -X_i . U_j (j < i);  A_ij = beta_i D_ij k_i.k_j
  for (int64_t i = 0; i < C; ++i) {
    const float* ki = h.k + (t0 + i) * h.lq;
    const float bi = h.beta[(t0 + i) * h.lh];
    float* dki = gr.dk + (t0 + i) * gr.lq;
    float dbi = 0;
    for (int64_t j = 0; j < i; ++j) {
      const float da = -dotf(X + i * DV, c.U.data() + j * DV, DV);
      const float aij = c.KK[size_t(i * C + j)];  // beta_i D_ij kk
      const float dij = std::exp(c.gam[size_t(i)] - c.gam[size_t(j)]);
      const float* kj = h.k + (t0 + j) * h.lq;
      dbi += da * dij * dotf(ki, kj, DK);
      const float w = da * bi * dij;
      axpy(w, kj, dki, DK);
      axpy(w, ki, gr.dk + (t0 + j) * gr.lq, DK);
      dgam[i] += da * aij;
      dgam[j] -= da * aij;
    }
    // R_i = beta_i (v_i - G_i KS_i)
    const float* xi = X + i * DV;
    const float* vi = h.v + (t0 + i) * h.lv;
    const float* ks = c.KS.data() + i * DV;
    const float Gi = c.G[size_t(i)];
    float* dvi = gr.dv + (t0 + i) * gr.lv;
    float sb = 0, sg = 0;
    for (int64_t j = 0; j < DV; ++j) {
      dvi[j] = bi * xi[j];
      sb += xi[j] * (vi[j] - Gi * ks[j]);
      sg += xi[j] * ks[j];
    }
    gr.db[(t0 + i) * gr.lh] = dbi + sb;
    dgam[i] -= bi * Gi * sg;
    // KS_i = S0^T k_i: dk_i += S0 dKS_i, dS0 += k_i dKS_i^T with dKS_i = -beta_i G_i X_i
    const float c2 = -bi * Gi;
    for (int64_t m = 0; m < DK; ++m) {
      dki[m] += c2 * dotf(S0 + m * DV, xi, DV);
      axpy(c2 * ki[m], xi, dS0 + m * DV, DV);
    }
  }
  float acc = 0;  // dg = reverse cumulative sum of dgam
  for (int64_t i = C - 1; i >= 0; --i) {
    acc += dgam[i];
    gr.dg[(t0 + i) * gr.lh] = acc;
  }
  std::copy(dS0, dS0 + DK * DV, dS);
}

void head_backward(const Head& h, const int64_t* seg, const Dims& d, int64_t b, const float* init, int64_t chunk,
                   const float* dO, int64_t lo, const float* dfin, const HeadGrads& gr, float* dinit) {
  const int64_t DK = h.DK, DV = h.DV, SS = DK * DV;
  std::vector<std::pair<int64_t, int64_t>> docs;
  for_documents(seg, d, b, [&](int64_t a, int64_t e) { docs.push_back({a, e}); });
  std::vector<float> dS(static_cast<size_t>(SS)), states, scratch;
  Chunk c;
  c.size(chunk, DV);
  for (int64_t t = 0; t < d.S; ++t) {
    std::fill(gr.dq + t * gr.lq, gr.dq + t * gr.lq + DK, 0.0f);
    std::fill(gr.dk + t * gr.lq, gr.dk + t * gr.lq + DK, 0.0f);
  }
  for (size_t di = docs.size(); di-- > 0;) {
    const auto [a, e] = docs[di];
    const int64_t n = (e - a + chunk - 1) / chunk;
    states.resize(size_t((n + 1) * SS));  // the state entering each chunk, then the document's end state
    if (di == 0 && init) std::copy(init, init + SS, states.begin());
    else std::fill(states.begin(), states.begin() + SS, 0.0f);
    for (int64_t ci = 0; ci < n; ++ci) {
      const int64_t t0 = a + ci * chunk, C = std::min(chunk, e - t0);
      chunk_forward(h, t0, C, states.data() + ci * SS, c);
      std::copy(states.begin() + ci * SS, states.begin() + (ci + 1) * SS, states.begin() + (ci + 1) * SS);
      chunk_state(h, t0, C, c, states.data() + (ci + 1) * SS);
    }
    if (di + 1 == docs.size() && dfin) std::copy(dfin, dfin + SS, dS.begin());
    else std::fill(dS.begin(), dS.end(), 0.0f);
    for (int64_t ci = n - 1; ci >= 0; --ci) {
      const int64_t t0 = a + ci * chunk, C = std::min(chunk, e - t0);
      chunk_forward(h, t0, C, states.data() + ci * SS, c);
      chunk_backward(h, t0, C, states.data() + ci * SS, c, dO, lo, dS.data(), gr, scratch);
    }
    if (di == 0 && dinit) std::copy(dS.begin(), dS.end(), dinit);
  }
}

void backward(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
              const Tensor& beta, const int64_t* seg, const Tensor& init, const Tensor& dout, const Tensor& dfin,
              const GatedDeltaOptions& o, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dg, Tensor& dbeta,
              Tensor& dinit) {
  opcheck::host_context(ctx, "gated_delta.cpu");
  const Dims d = gated_delta::check_backward(q, k, v, g, beta, seg, init, dout, dfin, dq, dk, dv, dg, dbeta, dinit,
                                             "gated_delta.cpu backward");
  TITAN_CHECK(o.chunk >= 1, "gated_delta.cpu backward: chunk must be >= 1, got ", o.chunk);
  const float scale = gated_delta::scale_of(o, d.dk);
  std::vector<float> qn, kn, rq, rk;
  normalise(q, d.B * d.S * d.Hk, d.dk, scale, o.l2norm, qn, rq);
  normalise(k, d.B * d.S * d.Hk, d.dk, 1.0f, o.l2norm, kn, rk);
  const int64_t SS = d.dk * d.dv;
  // dq^, dk^ per value head: [B, S, Hv, dk]
  std::vector<float> dqh(size_t(d.B * d.S * d.Hv * d.dk)), dkh(dqh.size());
  parallel_for(d.B * d.Hv, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / d.Hv, hv = p % d.Hv;
      const int64_t ofs = (b * d.S * d.Hv + hv);
      HeadGrads gr{dqh.data() + ofs * d.dk, dkh.data() + ofs * d.dk, dv.data<float>() + ofs * d.dv,
                   dg.data<float>() + ofs, dbeta.data<float>() + ofs, d.Hv * d.dk, d.Hv * d.dv, d.Hv};
      head_backward(head_of(qn, kn, v, g, beta, d, b, hv), seg, d, b,
                    init.defined() ? init.data<float>() + p * SS : nullptr, o.chunk,
                    dout.data<float>() + ofs * d.dv, d.Hv * d.dv, dfin.defined() ? dfin.data<float>() + p * SS : nullptr,
                    gr, dinit.defined() ? dinit.data<float>() + p * SS : nullptr);
    }
  });
  // Sum the group's heads (in order), then back through the normalisation: dx = s r (dy - y^ (y^ . dy)).
  const int64_t ratio = d.Hv / d.Hk, n = d.B * d.S * d.Hk, DK = d.dk;
  parallel_for(n, 64, [&](int64_t i0, int64_t i1) {
    std::vector<float> gq(static_cast<size_t>(DK)), gk(static_cast<size_t>(DK));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t bt = i / d.Hk, hk = i % d.Hk;
      std::fill(gq.begin(), gq.end(), 0.0f);
      std::fill(gk.begin(), gk.end(), 0.0f);
      for (int64_t r = 0; r < ratio; ++r) {
        const int64_t hv = hk * ratio + r;
        axpy(1.0f, dqh.data() + (bt * d.Hv + hv) * DK, gq.data(), DK);
        axpy(1.0f, dkh.data() + (bt * d.Hv + hv) * DK, gk.data(), DK);
      }
      for (int pass = 0; pass < 2; ++pass) {
        const float* y = (pass ? kn : qn).data() + i * DK;
        const float s = pass ? 1.0f : scale, r = (pass ? rk : rq)[size_t(i)];
        const float* gy = (pass ? gk : gq).data();
        float* dx = (pass ? dk : dq).data<float>() + i * DK;
        if (!o.l2norm) {
          for (int64_t j = 0; j < DK; ++j) dx[j] = s * gy[j];
          continue;
        }
        const float dot = dotf(y, gy, DK) / s;  // y / s = x r
        for (int64_t j = 0; j < DK; ++j) dx[j] = s * r * (gy[j] - (y[j] / s) * dot);
      }
    }
  });
}

void step(const ExecContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
          const Tensor& beta, const GatedDeltaOptions& o, Tensor& state, Tensor& out) {
  opcheck::host_context(ctx, "gated_delta.cpu");
  const Dims d = gated_delta::check_step(q, k, v, g, beta, state, out, "gated_delta.cpu step");
  std::vector<float> qn, kn, rq, rk;
  normalise(q, d.B * d.Hk, d.dk, gated_delta::scale_of(o, d.dk), o.l2norm, qn, rq);
  normalise(k, d.B * d.Hk, d.dk, 1.0f, o.l2norm, kn, rk);
  const int64_t DK = d.dk, DV = d.dv, ratio = d.Hv / d.Hk;
  parallel_for(d.B * d.Hv, 1, [&](int64_t p0, int64_t p1) {
    std::vector<float> dl(static_cast<size_t>(DV));
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t b = p / d.Hv, hk = (p % d.Hv) / ratio;
      float* S = state.data<float>() + p * DK * DV;
      const float* qt = qn.data() + (b * d.Hk + hk) * DK;
      const float* kt = kn.data() + (b * d.Hk + hk) * DK;
      const float a = std::exp(g.data<float>()[p]), bt = beta.data<float>()[p];
      const float* vt = v.data<float>() + p * DV;
      float* ot = out.data<float>() + p * DV;
      for (int64_t m = 0; m < DK * DV; ++m) S[m] *= a;
      std::fill(dl.begin(), dl.end(), 0.0f);
      for (int64_t m = 0; m < DK; ++m) axpy(kt[m], S + m * DV, dl.data(), DV);
      for (int64_t j = 0; j < DV; ++j) dl[size_t(j)] = bt * (vt[j] - dl[size_t(j)]);
      for (int64_t m = 0; m < DK; ++m) axpy(kt[m], dl.data(), S + m * DV, DV);
      std::fill(ot, ot + DV, 0.0f);
      for (int64_t m = 0; m < DK; ++m) axpy(qt[m], S + m * DV, ot, DV);
    }
  });
}

const GatedDeltaKernel kCpu{"cpu", forward, backward, step};

}  // namespace
TITAN_REGISTER_KERNEL(GatedDeltaKernel, "cpu", DeviceType::CPU, kCpu);
}  // namespace titan
