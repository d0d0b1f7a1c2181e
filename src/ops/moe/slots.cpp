// The routing and un-permutation steps of the permuted MoE variants (the grouped-GEMM one and
// expert parallelism): see moe.h for the math and the declarations.
#include <vector>

#include "core/threading.h"
#include "ops/matmul/matmul.h"
#include "ops/moe/moe.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

void gemm_f32(const ExecContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
              const float* b, int64_t ldb, float* c, int64_t ldc, float beta) {
  static const GemmKernel& gk = kernel<GemmKernel>("cpu");
  GemmArgs g;
  g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k;
  g.a = a, g.lda = lda, g.b = b, g.ldb = ldb, g.c = c, g.ldc = ldc, g.beta = beta, g.in_dtype = DType::F32;
  gemm(ctx, gk, g);
}

}  // namespace

void moe_check_grads(const MoEArgs& a, const MoESaved& s, const MoEGrads& gr) {
  if (gr.dx) opcheck::f32(*gr.dx, "moe", "dx");
  if (gr.dx) opcheck::same_shape(*gr.dx, *a.x, "moe", "dx", "x");
  if (gr.drouter) opcheck::f32(*gr.drouter, "moe", "drouter");
  if (gr.drouter) opcheck::same_shape(*gr.drouter, *a.router, "moe", "drouter", "router");
  if (gr.dgate_up) opcheck::f32(*gr.dgate_up, "moe", "dgate_up");
  if (gr.dgate_up) opcheck::same_shape(*gr.dgate_up, *a.gate_up, "moe", "dgate_up", "gate_up");
  if (gr.ddown) opcheck::f32(*gr.ddown, "moe", "ddown");
  if (gr.ddown) opcheck::same_shape(*gr.ddown, *a.down, "moe", "ddown", "down");
  if (gr.dlogits_extra) opcheck::same_shape(*gr.dlogits_extra, s.logits, "moe", "dlogits_extra", "logits");
}

void moe_route(const ExecContext& ctx, const MoEArgs& a, int64_t T, int64_t H, int64_t E, int64_t K, MoESaved& s) {
  s.logits = Tensor::empty({T, E}, DType::F32);
  s.topk_idx = Tensor::empty({T, K}, DType::I32);
  s.topk_w = Tensor::empty({T, K}, DType::F32);
  s.tokens_per_expert = Tensor::zeros({E}, DType::I64);
  gemm_f32(ctx, false, true, T, E, H, a.x->data<float>(), H, a.router->data<float>(), H, s.logits.data<float>(), E,
           0.f);
  const float* bias = a.bias ? a.bias->data<float>() : nullptr;
  parallel_for(T, 32, [&](int64_t t0, int64_t t1) {
    std::vector<float> p(static_cast<size_t>(E));
    for (int64_t t = t0; t < t1; ++t) {
      moe_softmax_row(s.logits.data<float>() + t * E, E, p.data());
      moe_route_token(p.data(), bias, E, K, a.norm_topk_prob, s.topk_idx.data<int32_t>() + t * K,
                      s.topk_w.data<float>() + t * K);
    }
  });
  const int32_t* sel = s.topk_idx.data<int32_t>();
  int64_t* cnt = s.tokens_per_expert.data<int64_t>();
  for (int64_t j = 0; j < T * K; ++j) cnt[sel[j]] += 1;
}

void moe_combine(const float* w, const int32_t* row, const float* out, int64_t T, int64_t H, int64_t K, float* y) {
  parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* yr = y + t * H;
      for (int64_t h = 0; h < H; ++h) yr[h] = 0.f;
      for (int64_t k = 0; k < K; ++k) {
        const float wk = w[t * K + k];
        const float* orow = out + int64_t(row[t * K + k]) * H;
        for (int64_t h = 0; h < H; ++h) yr[h] += wk * orow[h];
      }
    }
  });
}

void moe_router_and_input_grads(const ExecContext& ctx, const MoEArgs& a, const MoESaved& s, const double* dw,
                                const float* dx_rows, const int32_t* row, const MoEGrads& gr) {
  const int64_t T = s.topk_idx.dim(0), K = s.topk_idx.dim(1), E = s.logits.dim(1), H = a.x->dim(1);
  // Router gradient through the renormalization and the softmax.
  Tensor dlogits = Tensor::empty({T, E}, DType::F32);
  float* dl = dlogits.data<float>();
  const int32_t* sel = s.topk_idx.data<int32_t>();
  const float* w = s.topk_w.data<float>();
  parallel_for(T, 32, [&](int64_t t0, int64_t t1) {
    std::vector<float> p(static_cast<size_t>(E));
    std::vector<double> dp(static_cast<size_t>(E)), drow(static_cast<size_t>(E));
    for (int64_t t = t0; t < t1; ++t) {
      moe_router_grad_row(s.logits.data<float>() + t * E, sel + t * K, w + t * K, dw + t * K, E, K, a.norm_topk_prob,
                          gr.dlogits_extra ? gr.dlogits_extra->data<float>() + t * E : nullptr, p.data(), dp.data(),
                          drow.data());
      for (int64_t e = 0; e < E; ++e) dl[t * E + e] = float(drow[size_t(e)]);
    }
  });
  if (gr.drouter)  // drouter [E, H] += dlogits^T @ x
    gemm_f32(ctx, true, false, E, H, T, dl, E, a.x->data<float>(), H, gr.drouter->data<float>(), H, 1.f);
  if (!gr.dx) return;
  gemm_f32(ctx, false, false, T, H, E, dl, E, a.router->data<float>(), H, gr.dx->data<float>(), H, 0.f);
  float* dxo = gr.dx->data<float>();
  parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int64_t k = 0; k < K; ++k) {
        const float* src = dx_rows + int64_t(row[t * K + k]) * H;
        for (int64_t h = 0; h < H; ++h) dxo[t * H + h] += src[h];
      }
  });
}

}  // namespace titan
