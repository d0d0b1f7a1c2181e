// MoE routing pieces shared by every variant (see moe.h for the math): argument checks, the
// per-token softmax and top-k, HF's load-balancing auxiliary loss and torchtitan's expert-bias update.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/moe/moe.h"
#include "ops/op_checks.h"

namespace titan {

MoEDims moe_check_args(const MoEArgs& a, const char* variant, int64_t ep) {
  TITAN_CHECK(a.x && a.router && a.gate_up && a.down, "moe.", variant, ": x, router, gate_up and down are required");
  opcheck::f32(*a.x, "moe", "x");
  opcheck::f32(*a.router, "moe", "router");
  for (const auto& [w, name] : {std::pair{a.gate_up, "gate_up"}, std::pair{a.down, "down"}}) {
    opcheck::defined(*w, "moe", name);
    TITAN_CHECK(w->dtype() == DType::F32 || (w->dtype() == DType::BF16 && a.compute == DType::BF16), "moe: '", name,
                "' must be f32 (or bf16 with compute bf16), got ", w->str(), " with compute ", dtype_name(a.compute));
  }
  TITAN_CHECK(a.x->ndim() == 2, "moe: x must be [T, H], got ", a.x->str());
  TITAN_CHECK(a.router->ndim() == 2, "moe: router must be [E, H], got ", a.router->str());
  const int64_t T = a.x->dim(0), H = a.x->dim(1), E = a.router->dim(0);
  TITAN_CHECK(a.router->dim(1) == H && E > 0, "moe: router ", a.router->str(), " does not match x ", a.x->str());
  TITAN_CHECK(ep >= 1 && E % ep == 0, "moe: ", E, " experts do not divide over ", ep, " expert-parallel ranks");
  const int64_t El = E / ep;  // the experts this rank holds
  TITAN_CHECK(a.gate_up->ndim() == 3 && a.gate_up->dim(0) == El && a.gate_up->dim(2) == H && a.gate_up->dim(1) % 2 == 0,
              "moe: gate_up must be [E=", El, ", 2I, H=", H, "], got ", a.gate_up->str());
  const int64_t I = a.gate_up->dim(1) / 2;
  TITAN_CHECK(a.down->ndim() == 3 && a.down->dim(0) == El && a.down->dim(1) == H && a.down->dim(2) == I,
              "moe: down must be [E=", El, ", H=", H, ", I=", I, "], got ", a.down->str());
  TITAN_CHECK(a.top_k >= 1 && a.top_k <= E, "moe: top_k must be in [1, ", E, "], got ", a.top_k);
  if (a.bias) {
    opcheck::f32(*a.bias, "moe", "bias");
    opcheck::numel(*a.bias, E, "moe", "bias");
  }
  TITAN_CHECK(a.compute == DType::F32 || a.compute == DType::BF16, "moe: compute dtype must be f32 or bf16, got ",
              dtype_name(a.compute));
  return {T, H, E, I, a.top_k};
}

void moe_softmax_row(const float* logits, int64_t E, float* p) {
  double mx = logits[0];
  for (int64_t e = 1; e < E; ++e) mx = logits[e] > mx ? logits[e] : mx;
  double sum = 0;
  for (int64_t e = 0; e < E; ++e) sum += std::exp(double(logits[e]) - mx);
  for (int64_t e = 0; e < E; ++e) p[e] = float(std::exp(double(logits[e]) - mx) / sum);
}

void moe_router_grad_row(const float* logits, const int32_t* sel, const float* w, const double* dw, int64_t E,
                         int64_t K, bool norm, const float* extra, float* p, double* dp, double* dlogits) {
  moe_softmax_row(logits, E, p);
  std::fill(dp, dp + E, 0.0);
  double S = 0, sw = 0;
  for (int64_t k = 0; k < K; ++k) {
    S += p[sel[k]];
    sw += dw[k] * w[k];
  }
  for (int64_t k = 0; k < K; ++k) dp[sel[k]] = norm ? (dw[k] - sw) / S : dw[k];
  double dot = 0;
  for (int64_t e = 0; e < E; ++e) dot += double(p[e]) * dp[e];
  for (int64_t e = 0; e < E; ++e) dlogits[e] = double(p[e]) * (dp[e] - dot) + (extra ? double(extra[e]) : 0.0);
}

void moe_route_token(const float* p, const float* bias, int64_t E, int64_t K, bool norm, int32_t* idx, float* w) {
  // K passes of an arg-max that keeps the first (lowest-index) maximum: a stable descending order.
  // The score is computed in f32 as torchtitan's `scores + expert_bias`.
  for (int64_t k = 0; k < K; ++k) {
    int64_t best = -1;
    float best_score = 0.f;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t j = 0; j < k; ++j) taken = taken || idx[j] == e;
      if (taken) continue;
      const float s = bias ? p[e] + bias[e] : p[e];
      if (best < 0 || s > best_score) {
        best = e;
        best_score = s;
      }
    }
    idx[k] = int32_t(best);
  }
  double sum = 0;
  for (int64_t k = 0; k < K; ++k) sum += p[idx[k]];
  for (int64_t k = 0; k < K; ++k) w[k] = norm ? float(double(p[idx[k]]) / sum) : p[idx[k]];
}

double moe_aux_loss(const std::vector<const Tensor*>& logits, int64_t top_k, std::vector<Tensor*>* dlogits,
                    float scale) {
  TITAN_CHECK(!logits.empty(), "moe_aux_loss: no router logits");
  const int64_t E = logits[0]->dim(-1);
  TITAN_CHECK(top_k >= 1 && top_k <= E, "moe_aux_loss: top_k must be in [1, ", E, "], got ", top_k);
  if (dlogits) TITAN_CHECK(dlogits->size() == logits.size(), "moe_aux_loss: one dlogits tensor per layer needed");
  std::vector<double> count(size_t(E), 0.0), psum(size_t(E), 0.0);
  std::vector<float> p(static_cast<size_t>(E)), w(static_cast<size_t>(top_k));
  std::vector<int32_t> idx(static_cast<size_t>(top_k));
  double N = 0;
  for (const Tensor* l : logits) {
    opcheck::f32(*l, "moe_aux_loss", "router logits");
    TITAN_CHECK(l->ndim() == 2 && l->dim(1) == E, "moe_aux_loss: router logits must be [T, ", E, "], got ", l->str());
    const float* lp = l->data<float>();
    for (int64_t n = 0; n < l->dim(0); ++n) {
      moe_softmax_row(lp + n * E, E, p.data());
      moe_route_token(p.data(), nullptr, E, top_k, false, idx.data(), w.data());
      for (int64_t k = 0; k < top_k; ++k) count[size_t(idx[size_t(k)])] += 1;
      for (int64_t e = 0; e < E; ++e) psum[size_t(e)] += p[size_t(e)];
    }
    N += double(l->dim(0));
  }
  TITAN_CHECK(N > 0, "moe_aux_loss: no router logit rows");
  double loss = 0;
  for (int64_t e = 0; e < E; ++e) loss += (count[size_t(e)] / N) * (psum[size_t(e)] / N);
  loss *= double(E);
  if (!dlogits) return loss;
  std::vector<double> g(static_cast<size_t>(E));  // dloss/dp[n, e], the same for every row
  for (int64_t e = 0; e < E; ++e) g[size_t(e)] = double(E) * (count[size_t(e)] / N) / N;
  for (size_t li = 0; li < logits.size(); ++li) {
    const Tensor& l = *logits[li];
    Tensor& d = *(*dlogits)[li];
    opcheck::f32(d, "moe_aux_loss", "dlogits");
    opcheck::same_shape(d, l, "moe_aux_loss", "dlogits", "logits");
    const float* lp = l.data<float>();
    float* dp = d.data<float>();
    for (int64_t n = 0; n < l.dim(0); ++n) {
      moe_softmax_row(lp + n * E, E, p.data());
      double dot = 0;
      for (int64_t e = 0; e < E; ++e) dot += double(p[size_t(e)]) * g[size_t(e)];
      for (int64_t e = 0; e < E; ++e) dp[n * E + e] = float(double(scale) * p[size_t(e)] * (g[size_t(e)] - dot));
    }
  }
  return loss;
}

void moe_update_expert_bias(Tensor& bias, const Tensor& tokens_per_expert, float coeff) {
  opcheck::f32(bias, "moe_update_expert_bias", "bias");
  const int64_t E = bias.numel();
  opcheck::numel(tokens_per_expert, E, "moe_update_expert_bias", "tokens_per_expert");
  TITAN_CHECK(tokens_per_expert.dtype() == DType::I64 || tokens_per_expert.dtype() == DType::F32,
              "moe_update_expert_bias: tokens_per_expert must be i64 or f32, got ", tokens_per_expert.str());
  std::vector<double> c(static_cast<size_t>(E));
  double mean = 0;
  for (int64_t e = 0; e < E; ++e) {
    c[size_t(e)] = tokens_per_expert.dtype() == DType::I64 ? double(tokens_per_expert.data<int64_t>()[e])
                                                           : double(tokens_per_expert.data<float>()[e]);
    mean += c[size_t(e)];
  }
  mean /= double(E);
  // torchtitan computes in f32: delta = coeff * sign(mean - c); delta -= delta.mean(); bias += delta.
  std::vector<float> delta(static_cast<size_t>(E));
  double dmean = 0;
  for (int64_t e = 0; e < E; ++e) {
    const double s = mean - c[size_t(e)];
    delta[size_t(e)] = coeff * float(s > 0 ? 1 : (s < 0 ? -1 : 0));
    dmean += delta[size_t(e)];
  }
  dmean /= double(E);
  float* b = bias.data<float>();
  for (int64_t e = 0; e < E; ++e) b[e] += delta[size_t(e)] - float(dmean);
}

}  // namespace titan
