// MoE block, reference variant: HF's loop over experts spelled out in plain loops with double
// accumulation (see moe.h for the math). With compute BF16 the inputs of every expert product are
// rounded to bf16 at the same points as the grouped-GEMM variant (x, weights, the SwiGLU output,
// dy and the gate/up gradient), then multiplied and summed in double. The router is always f32.
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "ops/moe/moe.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

struct Rounder {
  bool bf16;
  double operator()(float v) const { return bf16 ? double(bf16_to_f32(f32_to_bf16(v))) : double(v); }
  double operator()(double v) const { return (*this)(float(v)); }
};

double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

void route_all(const MoEArgs& a, const MoEDims& d, MoESaved& s) {
  const auto [T, H, E, I, K] = d;
  s.logits = Tensor::empty({T, E}, DType::F32);
  s.topk_idx = Tensor::empty({T, K}, DType::I32);
  s.topk_w = Tensor::empty({T, K}, DType::F32);
  s.tokens_per_expert = Tensor::zeros({E}, DType::I64);
  s.acts = Tensor();
  s.slot_pos = Tensor();
  const float* x = a.x->data<float>();        // [T, H]
  const float* wg = a.router->data<float>();  // [E, H]
  float* lg = s.logits.data<float>();         // [T, E]
  std::vector<float> p(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      double acc = 0;
      for (int64_t h = 0; h < H; ++h) acc += double(x[t * H + h]) * wg[e * H + h];
      lg[t * E + e] = float(acc);
    }
    moe_softmax_row(lg + t * E, E, p.data());
    moe_route_token(p.data(), a.bias ? a.bias->data<float>() : nullptr, E, K, a.norm_topk_prob,
                    s.topk_idx.data<int32_t>() + t * K, s.topk_w.data<float>() + t * K);
    for (int64_t k = 0; k < K; ++k) s.tokens_per_expert.data<int64_t>()[s.topk_idx.data<int32_t>()[t * K + k]] += 1;
  }
}

// One expert on one token: gate/up pre-activations g, u [I], act [I] (rounded as the GEMM input
// of the down projection) and out [H] = down[e] @ act.
void expert_token(const MoEArgs& a, const MoEDims& d, int64_t e, int64_t t, Rounder rb, std::vector<double>& g,
                  std::vector<double>& u, std::vector<double>& act, std::vector<double>* out) {
  const auto [T, H, E, I, K] = d;
  const float* x = a.x->data<float>() + t * H;
  const float* gu = a.gate_up->data<float>() + e * 2 * I * H;  // [2I, H]
  const float* dn = a.down->data<float>() + e * H * I;         // [H, I]
  for (int64_t i = 0; i < I; ++i) {
    double ga = 0, ua = 0;
    for (int64_t h = 0; h < H; ++h) {
      const double xv = rb(x[h]);
      ga += xv * rb(gu[i * H + h]);
      ua += xv * rb(gu[(I + i) * H + h]);
    }
    // The GEMM writes gate/up in f32; the SwiGLU reads those f32 values.
    g[size_t(i)] = float(ga);
    u[size_t(i)] = float(ua);
    act[size_t(i)] = rb(g[size_t(i)] * sigmoid(g[size_t(i)]) * u[size_t(i)]);
  }
  if (!out) return;
  for (int64_t h = 0; h < H; ++h) {
    double acc = 0;
    for (int64_t i = 0; i < I; ++i) acc += act[size_t(i)] * rb(dn[h * I + i]);
    (*out)[size_t(h)] = float(acc);
  }
}

// The arguments with any BF16 weight widened to f32 (exact), so the loops read floats.
struct F32Weights {
  Tensor gu, dn;
  MoEArgs a;
  explicit F32Weights(const MoEArgs& in) : a(in) {
    if (in.gate_up->dtype() == DType::BF16) gu = in.gate_up->to(DType::F32), a.gate_up = &gu;
    if (in.down->dtype() == DType::BF16) dn = in.down->to(DType::F32), a.down = &dn;
  }
};

void forward(const ExecContext& ctx, const MoEArgs& args, Tensor& y, MoESaved& s) {
  opcheck::host_context(ctx, "moe.reference");
  moe_check_args(args, "reference");
  const F32Weights fw(args);
  const MoEArgs& a = fw.a;
  const MoEDims d = moe_check_args(a, "reference");
  const auto [T, H, E, I, K] = d;
  opcheck::f32(y, "moe", "y");
  TITAN_CHECK(y.ndim() == 2 && y.dim(0) == T && y.dim(1) == H, "moe: y must be [", T, ", ", H, "], got ", y.str());
  route_all(a, d, s);
  const Rounder rb{a.compute == DType::BF16};
  std::vector<double> g(static_cast<size_t>(I)), u(static_cast<size_t>(I)), act(static_cast<size_t>(I)), out(static_cast<size_t>(H)), acc(static_cast<size_t>(H));
  float* yp = y.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = s.topk_idx.data<int32_t>()[t * K + k];
      const double w = s.topk_w.data<float>()[t * K + k];
      expert_token(a, d, e, t, rb, g, u, act, &out);
      for (int64_t h = 0; h < H; ++h) acc[size_t(h)] += w * out[size_t(h)];
    }
    for (int64_t h = 0; h < H; ++h) yp[t * H + h] = float(acc[size_t(h)]);
  }
}

void backward(const ExecContext& ctx, const MoEArgs& args, const MoESaved& s, const Tensor& dy, const MoEGrads& gr) {
  opcheck::host_context(ctx, "moe.reference");
  moe_check_args(args, "reference");
  const F32Weights fw(args);
  const MoEArgs& a = fw.a;
  const MoEDims d = moe_check_args(a, "reference");
  const auto [T, H, E, I, K] = d;
  opcheck::f32(dy, "moe", "dy");
  TITAN_CHECK(dy.ndim() == 2 && dy.dim(0) == T && dy.dim(1) == H, "moe: dy must be [", T, ", ", H, "], got ", dy.str());
  TITAN_CHECK(s.topk_idx.defined() && s.topk_idx.dim(0) == T && s.topk_idx.dim(1) == K,
              "moe: saved routing does not match these arguments (run forward first)");
  moe_check_grads(a, s, gr);
  const Rounder rb{a.compute == DType::BF16};
  const float* x = a.x->data<float>();
  const float* dyp = dy.data<float>();
  const int32_t* sel = s.topk_idx.data<int32_t>();
  const float* wts = s.topk_w.data<float>();
  std::vector<double> dx(size_t(T * H), 0.0), dlogits(size_t(T * E), 0.0), dw(size_t(T * K), 0.0);
  std::vector<double> g(static_cast<size_t>(I)), u(static_cast<size_t>(I)), act(static_cast<size_t>(I)), out(static_cast<size_t>(H)), dgu(size_t(2 * I));
  std::vector<double> dgu_e(size_t(2 * I * H)), ddown_e(size_t(H * I));
  // Experts, one at a time (HF's loop), with that expert's weight gradients summed in double.
  for (int64_t e = 0; e < E; ++e) {
    std::fill(dgu_e.begin(), dgu_e.end(), 0.0);
    std::fill(ddown_e.begin(), ddown_e.end(), 0.0);
    const float* gu = a.gate_up->data<float>() + e * 2 * I * H;  // [2I, H]
    const float* dn = a.down->data<float>() + e * H * I;         // [H, I]
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) {
        if (sel[t * K + k] != e) continue;
        const double w = wts[t * K + k];
        expert_token(a, d, e, t, rb, g, u, act, &out);
        double dwk = 0;
        for (int64_t h = 0; h < H; ++h) dwk += double(dyp[t * H + h]) * out[size_t(h)];
        dw[size_t(t * K + k)] = dwk;
        for (int64_t h = 0; h < H; ++h) {  // ddown[e] += (w dy)^T act
          const double go = rb(float(w * dyp[t * H + h]));
          for (int64_t i = 0; i < I; ++i) ddown_e[size_t(h * I + i)] += go * act[size_t(i)];
        }
        for (int64_t i = 0; i < I; ++i) {  // dact = w * down[e]^T dy, then SwiGLU backward
          double da = 0;
          for (int64_t h = 0; h < H; ++h) da += rb(dyp[t * H + h]) * rb(dn[h * I + i]);
          da *= w;
          const double sg = sigmoid(g[size_t(i)]);
          dgu[size_t(i)] = rb(da * u[size_t(i)] * sg * (1.0 + g[size_t(i)] * (1.0 - sg)));
          dgu[size_t(I + i)] = rb(da * g[size_t(i)] * sg);
        }
        for (int64_t r = 0; r < 2 * I; ++r)
          for (int64_t h = 0; h < H; ++h) {
            dgu_e[size_t(r * H + h)] += dgu[size_t(r)] * rb(x[t * H + h]);
            dx[size_t(t * H + h)] += dgu[size_t(r)] * rb(gu[r * H + h]);
          }
      }
    if (gr.dgate_up) {
      float* p = gr.dgate_up->data<float>() + e * 2 * I * H;
      for (int64_t j = 0; j < 2 * I * H; ++j) p[j] = float(p[j] + dgu_e[size_t(j)]);
    }
    if (gr.ddown) {
      float* p = gr.ddown->data<float>() + e * H * I;
      for (int64_t j = 0; j < H * I; ++j) p[j] = float(p[j] + ddown_e[size_t(j)]);
    }
  }
  // Router: through the renormalization and the softmax (selection constant).
  std::vector<float> p(static_cast<size_t>(E));
  std::vector<double> dp(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    moe_router_grad_row(s.logits.data<float>() + t * E, sel + t * K, wts + t * K, dw.data() + t * K, E, K,
                        a.norm_topk_prob, gr.dlogits_extra ? gr.dlogits_extra->data<float>() + t * E : nullptr, p.data(),
                        dp.data(), dlogits.data() + t * E);
  const float* wg = a.router->data<float>();
  if (gr.drouter) {
    float* dr = gr.drouter->data<float>();
    for (int64_t e = 0; e < E; ++e)
      for (int64_t h = 0; h < H; ++h) {
        double acc = 0;
        for (int64_t t = 0; t < T; ++t) acc += dlogits[size_t(t * E + e)] * x[t * H + h];
        dr[e * H + h] = float(dr[e * H + h] + acc);
      }
  }
  if (gr.dx) {
    float* dxp = gr.dx->data<float>();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        double acc = dx[size_t(t * H + h)];
        for (int64_t e = 0; e < E; ++e) acc += dlogits[size_t(t * E + e)] * wg[e * H + h];
        dxp[t * H + h] = float(acc);
      }
  }
}

const MoEKernel kReference{"reference", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(MoEKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
