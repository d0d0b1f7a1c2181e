// The experts' SwiGLU FFN on grouped rows (math and layout in expert_ffn.h).
#include "ops/moe/expert_ffn.h"

#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/threading.h"
#include "ops/matmul/bf16_convert.h"
#include "ops/matmul/matmul.h"

namespace titan {
namespace {

const GemmKernel& gk() {
  static const GemmKernel& k = kernel<GemmKernel>("cpu");
  return k;
}

// A GEMM input buffer in f32, with its bf16 rounding when the product runs in bf16.
struct In {
  Tensor f32, bf;
  bool use_bf = false;
  // zero: when the producer leaves rows unwritten (padding rows skipped).
  void make(const Shape& s, bool bf16, bool zero = false) {
    f32 = zero ? Tensor::zeros(s, DType::F32) : Tensor::empty(s, DType::F32);
    use_bf = bf16;
  }
  void wrap(const Tensor& t, bool bf16) { f32 = t, use_bf = bf16; }
  void round() {
    if (use_bf) bf = to_bf16(f32);
  }
  // Pointer to element `off` of the matrix, in the dtype the GEMM reads.
  const void* at(int64_t off) const {
    return use_bf ? static_cast<const void*>(bf.data<bf16>() + off) : static_cast<const void*>(f32.data<float>() + off);
  }
  DType dt() const { return use_bf ? DType::BF16 : DType::F32; }
};

// A weight tensor as a GEMM input: the f32 tensor itself, or a bf16 copy (the tensor itself when
// the caller passed it already in bf16).
struct W {
  const Tensor* t;
  Tensor bf;
  W(const Tensor* w, bool bf16) : t(w) {
    if (bf16) bf = to_bf16(*w);  // no copy for a BF16 tensor
  }
  const void* at(int64_t off) const {
    return bf.defined() ? static_cast<const void*>(bf.data<bf16>() + off)
                        : static_cast<const void*>(t->data<float>() + off);
  }
};

void g_call(const ExecContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
            const void* b, int64_t ldb, float* c, int64_t ldc, float beta, DType dt) {
  GemmArgs g;
  g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k;
  g.a = a, g.lda = lda, g.b = b, g.ldb = ldb, g.c = c, g.ldc = ldc, g.beta = beta, g.in_dtype = dt;
  gemm(ctx, gk(), g);
}

float sigmoidf(float g) { return 1.f / (1.f + std::exp(-g)); }

void swiglu_rows(const float* gu, int64_t R, int64_t I, float* act) {
  parallel_for(R, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t i = 0; i < I; ++i) {
        const float g = gu[r * 2 * I + i], u = gu[r * 2 * I + I + i];
        act[r * I + i] = g * sigmoidf(g) * u;
      }
  });
}

// Whether row r of the layout is a real slot (not padding).
std::vector<char> real_rows(const ExpertGroups& G) {
  std::vector<char> real(size_t(G.rows), 0);
  for (int64_t e = 0; e < G.experts(); ++e)
    std::memset(real.data() + G.off[size_t(e)], 1, size_t(G.count[size_t(e)]));
  return real;
}

}  // namespace

ExpertGroups::ExpertGroups(const int64_t* counts, int64_t experts) {
  count.assign(counts, counts + experts);
  pad.resize(size_t(experts));
  off.resize(size_t(experts));
  for (int64_t e = 0; e < experts; ++e) {
    pad[size_t(e)] = (count[size_t(e)] + kExpertRowAlign - 1) / kExpertRowAlign * kExpertRowAlign;
    off[size_t(e)] = rows;
    rows += pad[size_t(e)];
  }
}

void expert_ffn_forward(const ExecContext& ctx, const Tensor& xp_f32, const ExpertGroups& G, const Tensor& gate_up,
                        const Tensor& down, DType compute, Tensor& gu_out, Tensor& out) {
  const int64_t E = G.experts(), H = xp_f32.dim(1), I = gate_up.dim(1) / 2;
  TITAN_CHECK(xp_f32.dim(0) == G.rows && gate_up.dim(0) == E && down.dim(0) == E,
              "moe experts: rows ", xp_f32.str(), " / weights ", gate_up.str(), " do not match ", E, " expert groups of ",
              G.rows, " rows");
  const bool bf = compute == DType::BF16;
  In xp, act;
  xp.wrap(xp_f32, bf);
  xp.round();
  const W gu_w(&gate_up, bf), dn_w(&down, bf);
  gu_out = Tensor::empty({G.rows, 2 * I}, DType::F32);
  float* gu = gu_out.data<float>();
  for (int64_t e = 0; e < E; ++e)
    if (G.pad[size_t(e)] > 0)
      g_call(ctx, false, true, G.pad[size_t(e)], 2 * I, H, xp.at(G.off[size_t(e)] * H), H, gu_w.at(e * 2 * I * H), H,
             gu + G.off[size_t(e)] * 2 * I, 2 * I, 0.f, xp.dt());
  act.make({G.rows, I}, bf);
  swiglu_rows(gu, G.rows, I, act.f32.data<float>());
  act.round();
  out = Tensor::empty({G.rows, H}, DType::F32);
  float* op = out.data<float>();
  for (int64_t e = 0; e < E; ++e)
    if (G.pad[size_t(e)] > 0)
      g_call(ctx, false, true, G.pad[size_t(e)], H, I, act.at(G.off[size_t(e)] * I), I, dn_w.at(e * H * I), I,
             op + G.off[size_t(e)] * H, H, 0.f, act.dt());
}

void expert_ffn_backward(const ExecContext& ctx, const Tensor& xp_f32, const ExpertGroups& G, const Tensor& gate_up,
                         const Tensor& down, DType compute, const Tensor& gu_saved, const float* w, Tensor& dy,
                         std::vector<double>& dw, Tensor* dgate_up, Tensor* ddown) {
  const int64_t E = G.experts(), H = dy.dim(1), I = gate_up.dim(1) / 2;
  TITAN_CHECK(dy.dim(0) == G.rows && gu_saved.dim(0) == G.rows && gu_saved.dim(1) == 2 * I,
              "moe experts: saved activations ", gu_saved.str(), " / gradient ", dy.str(), " do not match ", G.rows,
              " grouped rows");
  const bool bf = compute == DType::BF16;
  const float* gu = gu_saved.data<float>();
  const W gu_w(&gate_up, bf), dn_w(&down, bf);
  // act again (cheaper to recompute than to keep).
  In act;
  act.make({G.rows, I}, bf);
  swiglu_rows(gu, G.rows, I, act.f32.data<float>());
  act.round();
  // dA_raw = dy_e @ down[e]  (the gradient of act before the routing weight).
  In dyp;
  dyp.wrap(dy, bf);
  dyp.round();
  Tensor dA = Tensor::empty({G.rows, I}, DType::F32);
  float* dap = dA.data<float>();
  for (int64_t e = 0; e < E; ++e)
    if (G.pad[size_t(e)] > 0)
      g_call(ctx, false, false, G.pad[size_t(e)], I, H, dyp.at(G.off[size_t(e)] * H), H, dn_w.at(e * H * I), I,
             dap + G.off[size_t(e)] * I, I, 0.f, dyp.dt());
  // dw per row, dgu through the SwiGLU, and dy scaled by w for the down-projection gradient.
  dw.assign(size_t(G.rows), 0.0);
  In dgu;
  dgu.make({G.rows, 2 * I}, bf, /*zero=*/true);
  float* dgp = dgu.f32.data<float>();
  float* dyw = dyp.f32.data<float>();
  const float* actp = act.f32.data<float>();
  const std::vector<char> real = real_rows(G);
  parallel_for(G.rows, 32, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (!real[size_t(r)]) continue;  // padding rows stay zero
      const float wk = w[r];
      double d = 0;
      for (int64_t i = 0; i < I; ++i) d += double(dap[r * I + i]) * actp[r * I + i];
      dw[size_t(r)] = d;
      for (int64_t i = 0; i < I; ++i) {
        const float g = gu[r * 2 * I + i], u = gu[r * 2 * I + I + i];
        const float da = wk * dap[r * I + i], sg = sigmoidf(g);
        dgp[r * 2 * I + i] = da * u * sg * (1.f + g * (1.f - sg));
        dgp[r * 2 * I + I + i] = da * g * sg;
      }
      for (int64_t h = 0; h < H; ++h) dyw[r * H + h] *= wk;
    }
  });
  dgu.round();
  if (ddown) {
    dyp.round();  // now the weighted rows
    for (int64_t e = 0; e < E; ++e)
      if (G.pad[size_t(e)] > 0)  // ddown[e] [H, I] += dyw_e^T @ act_e
        g_call(ctx, true, false, H, I, G.pad[size_t(e)], dyp.at(G.off[size_t(e)] * H), H, act.at(G.off[size_t(e)] * I),
               I, ddown->data<float>() + e * H * I, I, 1.f, dyp.dt());
  }
  if (dgate_up) {
    In xp;
    xp.wrap(xp_f32, bf);
    xp.round();
    for (int64_t e = 0; e < E; ++e)
      if (G.pad[size_t(e)] > 0)  // dgate_up[e] [2I, H] += dgu_e^T @ x_e
        g_call(ctx, true, false, 2 * I, H, G.pad[size_t(e)], dgu.at(G.off[size_t(e)] * 2 * I), 2 * I,
               xp.at(G.off[size_t(e)] * H), H, dgate_up->data<float>() + e * 2 * I * H, H, 1.f, dgu.dt());
  }
  // dx rows = dgu_e @ gate_up[e] per group, into the dy buffer (no longer needed).
  float* dxp = dy.data<float>();
  for (int64_t e = 0; e < E; ++e)
    if (G.pad[size_t(e)] > 0)
      g_call(ctx, false, false, G.pad[size_t(e)], H, 2 * I, dgu.at(G.off[size_t(e)] * 2 * I), 2 * I,
             gu_w.at(e * 2 * I * H), H, dxp + G.off[size_t(e)] * H, H, 0.f, dgu.dt());
}

}  // namespace titan
