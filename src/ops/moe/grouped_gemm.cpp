// MoE block, grouped-GEMM variant (math in moe.h):
//   1. router logits x @ Wg^T (one GEMM), softmax + top-k per token (parallel over tokens);
//   2. permutation: the T*K (token, k) slots sorted by expert with a stable counting sort, so each
//      expert's tokens form one contiguous row group (in token order, hence deterministic);
//   3. per expert: gu = x_e @ gate_up[e]^T, act = silu(g) * u (fused, f32), out = act @ down[e]^T;
//   4. un-permute: y[t] = sum_k w[t,k] * out[row(t,k)], summed in k order.
// Backward runs the same groups in reverse (dact = w * dy @ down[e], dw = dact_raw . act, the
// SwiGLU derivative, weight gradients as group-transposed GEMMs accumulated into the f32 grads).
//
// Each group's row count is padded up to a multiple of kRowAlign with zero rows: the CPU GEMM
// caches one compiled primitive per shape, and padding keeps the number of distinct shapes small
// (a few dozen) however the tokens fall, at a cost of under kRowAlign rows per expert.
//
// Every reduction has a fixed order (GEMMs per expert, per-token sums in k order), so results do
// not depend on the thread count as long as the GEMM's do not.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/threading.h"
#include "ops/matmul/bf16_convert.h"
#include "ops/matmul/matmul.h"
#include "ops/moe/moe.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

constexpr int64_t kRowAlign = 16;

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
  void round() {
    if (use_bf) bf = to_bf16(f32);
  }
  // Pointer to row `r` of a row-major matrix with row length `ld`.
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

// Padded group layout: expert e owns rows [off[e], off[e] + pad[e]); its first count[e] rows are
// real slots, the rest zero.
struct Groups {
  std::vector<int64_t> count, pad, off;
  int64_t rows = 0;
  explicit Groups(const Tensor& tokens_per_expert) {
    const int64_t E = tokens_per_expert.numel();
    count.resize(static_cast<size_t>(E));
    pad.resize(static_cast<size_t>(E));
    off.resize(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      count[size_t(e)] = tokens_per_expert.data<int64_t>()[e];
      pad[size_t(e)] = (count[size_t(e)] + kRowAlign - 1) / kRowAlign * kRowAlign;
      off[size_t(e)] = rows;
      rows += pad[size_t(e)];
    }
  }
};

void g_call(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb,
            float* c, int64_t ldc, float beta, DType dt) {
  GemmArgs g;
  g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k;
  g.a = a, g.lda = lda, g.b = b, g.ldb = ldb, g.c = c, g.ldc = ldc, g.beta = beta, g.in_dtype = dt;
  gemm(gk(), g);
}

// Row r of the padded layout holds slot row_slot[r] (or -1 for padding).
std::vector<int64_t> row_slots(const Groups& G, const int32_t* pos, int64_t TK) {
  std::vector<int64_t> rs(size_t(G.rows), -1);
  for (int64_t s = 0; s < TK; ++s) rs[size_t(pos[s])] = s;
  return rs;
}

// xp[r] = x[token of row r] (zero rows for padding).
void gather_rows(const float* src, int64_t H, const std::vector<int64_t>& rs, int64_t K, float* dst) {
  parallel_for(int64_t(rs.size()), 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      if (rs[size_t(r)] < 0)
        std::memset(dst + r * H, 0, size_t(H) * sizeof(float));
      else
        std::memcpy(dst + r * H, src + (rs[size_t(r)] / K) * H, size_t(H) * sizeof(float));
    }
  });
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

void forward(const MoEArgs& a, Tensor& y, MoESaved& s) {
  const auto [T, H, E, I, K] = moe_check_args(a, "grouped_gemm");
  opcheck::f32(y, "moe", "y");
  TITAN_CHECK(y.ndim() == 2 && y.dim(0) == T && y.dim(1) == H, "moe: y must be [", T, ", ", H, "], got ", y.str());
  TITAN_CHECK(T * K < (int64_t(1) << 31), "moe.grouped_gemm: T * top_k = ", T * K, " exceeds its int32 slot index");
  const bool bf = a.compute == DType::BF16;
  // 1. Router (f32) and routing.
  s.logits = Tensor::empty({T, E}, DType::F32);
  s.topk_idx = Tensor::empty({T, K}, DType::I32);
  s.topk_w = Tensor::empty({T, K}, DType::F32);
  s.tokens_per_expert = Tensor::zeros({E}, DType::I64);
  g_call(false, true, T, E, H, a.x->data<float>(), H, a.router->data<float>(), H, s.logits.data<float>(), E, 0.f,
         DType::F32);
  const float* bias = a.bias ? a.bias->data<float>() : nullptr;
  parallel_for(T, 32, [&](int64_t t0, int64_t t1) {
    std::vector<float> p(static_cast<size_t>(E));
    for (int64_t t = t0; t < t1; ++t) {
      moe_softmax_row(s.logits.data<float>() + t * E, E, p.data());
      moe_route_token(p.data(), bias, E, K, a.norm_topk_prob, s.topk_idx.data<int32_t>() + t * K,
                      s.topk_w.data<float>() + t * K);
    }
  });
  // 2. Stable counting sort of the slots by expert.
  const int32_t* sel = s.topk_idx.data<int32_t>();
  int64_t* cnt = s.tokens_per_expert.data<int64_t>();
  for (int64_t j = 0; j < T * K; ++j) cnt[sel[j]] += 1;
  const Groups G(s.tokens_per_expert);
  s.slot_pos = Tensor::empty({T * K}, DType::I32);
  int32_t* pos = s.slot_pos.data<int32_t>();
  std::vector<int64_t> cursor = G.off;
  for (int64_t j = 0; j < T * K; ++j) pos[j] = int32_t(cursor[size_t(sel[j])]++);
  const std::vector<int64_t> rs = row_slots(G, pos, T * K);
  // 3. Expert GEMMs over the groups.
  In xp, act;
  xp.make({G.rows, H}, bf);
  gather_rows(a.x->data<float>(), H, rs, K, xp.f32.data<float>());
  xp.round();
  const W gu_w(a.gate_up, bf), dn_w(a.down, bf);
  s.acts = Tensor::empty({G.rows, 2 * I}, DType::F32);
  float* gu = s.acts.data<float>();
  for (int64_t e = 0; e < E; ++e)
    if (G.pad[size_t(e)] > 0)
      g_call(false, true, G.pad[size_t(e)], 2 * I, H, xp.at(G.off[size_t(e)] * H), H, gu_w.at(e * 2 * I * H), H,
             gu + G.off[size_t(e)] * 2 * I, 2 * I, 0.f, xp.dt());
  act.make({G.rows, I}, bf);
  swiglu_rows(gu, G.rows, I, act.f32.data<float>());
  act.round();
  Tensor out = Tensor::empty({G.rows, H}, DType::F32);
  float* op = out.data<float>();
  for (int64_t e = 0; e < E; ++e)
    if (G.pad[size_t(e)] > 0)
      g_call(false, true, G.pad[size_t(e)], H, I, act.at(G.off[size_t(e)] * I), I, dn_w.at(e * H * I), I,
             op + G.off[size_t(e)] * H, H, 0.f, act.dt());
  // 4. Un-permute with the routing weights.
  const float* w = s.topk_w.data<float>();
  float* yp = y.data<float>();
  parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* yr = yp + t * H;
      for (int64_t h = 0; h < H; ++h) yr[h] = 0.f;
      for (int64_t k = 0; k < K; ++k) {
        const float wk = w[t * K + k];
        const float* orow = op + int64_t(pos[t * K + k]) * H;
        for (int64_t h = 0; h < H; ++h) yr[h] += wk * orow[h];
      }
    }
  });
}

void backward(const MoEArgs& a, const MoESaved& s, const Tensor& dy, const MoEGrads& gr) {
  const auto [T, H, E, I, K] = moe_check_args(a, "grouped_gemm");
  opcheck::f32(dy, "moe", "dy");
  TITAN_CHECK(dy.ndim() == 2 && dy.dim(0) == T && dy.dim(1) == H, "moe: dy must be [", T, ", ", H, "], got ", dy.str());
  TITAN_CHECK(s.topk_idx.defined() && s.topk_idx.dim(0) == T && s.topk_idx.dim(1) == K && s.slot_pos.defined() &&
                  s.acts.defined() && s.acts.dim(1) == 2 * I,
              "moe.grouped_gemm: saved state does not come from this variant's forward with these arguments");
  if (gr.dx) opcheck::f32(*gr.dx, "moe", "dx");
  if (gr.dx) opcheck::same_shape(*gr.dx, *a.x, "moe", "dx", "x");
  if (gr.drouter) opcheck::f32(*gr.drouter, "moe", "drouter");
  if (gr.drouter) opcheck::same_shape(*gr.drouter, *a.router, "moe", "drouter", "router");
  if (gr.dgate_up) opcheck::f32(*gr.dgate_up, "moe", "dgate_up");
  if (gr.dgate_up) opcheck::same_shape(*gr.dgate_up, *a.gate_up, "moe", "dgate_up", "gate_up");
  if (gr.ddown) opcheck::f32(*gr.ddown, "moe", "ddown");
  if (gr.ddown) opcheck::same_shape(*gr.ddown, *a.down, "moe", "ddown", "down");
  if (gr.dlogits_extra) opcheck::same_shape(*gr.dlogits_extra, s.logits, "moe", "dlogits_extra", "logits");
  const bool bf = a.compute == DType::BF16;
  const Groups G(s.tokens_per_expert);
  TITAN_CHECK(s.acts.dim(0) == G.rows, "moe.grouped_gemm: saved activations do not match the saved routing");
  const int32_t* pos = s.slot_pos.data<int32_t>();
  const float* w = s.topk_w.data<float>();
  const std::vector<int64_t> rs = row_slots(G, pos, T * K);
  const float* gu = s.acts.data<float>();  // [R, 2I]
  const W gu_w(a.gate_up, bf), dn_w(a.down, bf);
  // act again (cheaper to recompute than to keep).
  In act;
  act.make({G.rows, I}, bf);
  swiglu_rows(gu, G.rows, I, act.f32.data<float>());
  act.round();
  // dA_raw = dy_e @ down[e]  (the gradient of act before the routing weight).
  In dyp;
  dyp.make({G.rows, H}, bf);
  gather_rows(dy.data<float>(), H, rs, K, dyp.f32.data<float>());
  dyp.round();
  Tensor dA = Tensor::empty({G.rows, I}, DType::F32);
  float* dap = dA.data<float>();
  for (int64_t e = 0; e < E; ++e)
    if (G.pad[size_t(e)] > 0)
      g_call(false, false, G.pad[size_t(e)], I, H, dyp.at(G.off[size_t(e)] * H), H, dn_w.at(e * H * I), I,
             dap + G.off[size_t(e)] * I, I, 0.f, dyp.dt());
  // dw per slot, dgu through the SwiGLU, and dy scaled by w for the down-projection gradient.
  std::vector<double> dw(size_t(T * K), 0.0);
  In dgu;
  dgu.make({G.rows, 2 * I}, bf, /*zero=*/true);
  float* dgp = dgu.f32.data<float>();
  float* dyw = dyp.f32.data<float>();
  const float* actp = act.f32.data<float>();
  parallel_for(G.rows, 32, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t sl = rs[size_t(r)];
      if (sl < 0) continue;  // padding rows stay zero
      const float wk = w[sl];
      double d = 0;
      for (int64_t i = 0; i < I; ++i) d += double(dap[r * I + i]) * actp[r * I + i];
      dw[size_t(sl)] = d;
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
  if (gr.ddown) {
    dyp.round();  // now the weighted rows
    for (int64_t e = 0; e < E; ++e)
      if (G.pad[size_t(e)] > 0)  // ddown[e] [H, I] += dyw_e^T @ act_e
        g_call(true, false, H, I, G.pad[size_t(e)], dyp.at(G.off[size_t(e)] * H), H, act.at(G.off[size_t(e)] * I), I,
               gr.ddown->data<float>() + e * H * I, I, 1.f, dyp.dt());
  }
  if (gr.dgate_up) {
    In xp;
    xp.make({G.rows, H}, bf);
    gather_rows(a.x->data<float>(), H, rs, K, xp.f32.data<float>());
    xp.round();
    for (int64_t e = 0; e < E; ++e)
      if (G.pad[size_t(e)] > 0)  // dgate_up[e] [2I, H] += dgu_e^T @ x_e
        g_call(true, false, 2 * I, H, G.pad[size_t(e)], dgu.at(G.off[size_t(e)] * 2 * I), 2 * I,
               xp.at(G.off[size_t(e)] * H), H, gr.dgate_up->data<float>() + e * 2 * I * H, H, 1.f, dgu.dt());
  }
  // Router gradient through the renormalization and the softmax.
  Tensor dlogits = Tensor::empty({T, E}, DType::F32);
  float* dl = dlogits.data<float>();
  const int32_t* sel = s.topk_idx.data<int32_t>();
  parallel_for(T, 32, [&](int64_t t0, int64_t t1) {
    std::vector<float> p(static_cast<size_t>(E));
    std::vector<double> dp(static_cast<size_t>(E)), row(static_cast<size_t>(E));
    for (int64_t t = t0; t < t1; ++t) {
      moe_router_grad_row(s.logits.data<float>() + t * E, sel + t * K, w + t * K, dw.data() + t * K, E, K,
                          a.norm_topk_prob, gr.dlogits_extra ? gr.dlogits_extra->data<float>() + t * E : nullptr,
                          p.data(), dp.data(), row.data());
      for (int64_t e = 0; e < E; ++e) dl[t * E + e] = float(row[size_t(e)]);
    }
  });

  if (gr.drouter)  // drouter [E, H] += dlogits^T @ x
    g_call(true, false, E, H, T, dl, E, a.x->data<float>(), H, gr.drouter->data<float>(), H, 1.f, DType::F32);
  if (gr.dx) {
    // dxp = dgu_e @ gate_up[e] per group (into the dy buffer, no longer needed), then the sum over k.
    float* dxp = dyp.f32.data<float>();
    for (int64_t e = 0; e < E; ++e)
      if (G.pad[size_t(e)] > 0)
        g_call(false, false, G.pad[size_t(e)], H, 2 * I, dgu.at(G.off[size_t(e)] * 2 * I), 2 * I,
               gu_w.at(e * 2 * I * H), H, dxp + G.off[size_t(e)] * H, H, 0.f, dgu.dt());
    g_call(false, false, T, H, E, dl, E, a.router->data<float>(), H, gr.dx->data<float>(), H, 0.f, DType::F32);
    float* dxo = gr.dx->data<float>();
    parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t k = 0; k < K; ++k) {
          const float* src = dxp + int64_t(pos[t * K + k]) * H;
          for (int64_t h = 0; h < H; ++h) dxo[t * H + h] += src[h];
        }
    });
  }
}

// Slot rows are stored as int32 (saved for backward): T * top_k must stay below 2^31.
std::string constraint(const KernelShape& s) {
  const int64_t slots = s.batch * s.seq * (s.top_k > 0 ? s.top_k : 1);
  if (slots >= (int64_t(1) << 31))
    return "batch * seq * top_k = " + std::to_string(slots) + " exceeds its int32 slot index (< 2^31)";
  return "";
}

const MoEKernel kGroupedGemm{"grouped_gemm", forward, backward, constraint};

}  // namespace
TITAN_REGISTER_KERNEL(MoEKernel, "grouped_gemm", DeviceType::CPU, kGroupedGemm);
}  // namespace titan
