// Fused lm_head + cross-entropy, reference variant: plain loops in double.
//   logits[n, v] = sum_k h[n, k] W[v, k]        (with compute = bf16, h and W rounded to bf16 first)
//   loss_n = log(sum_v exp(logits[n, v] - m_n)) + m_n - logits[n, label_n],  m_n = max_v logits[n, v]
//   dlogits[n, v] = grad_scale * (softmax(logits_n)[v] - [v == label_n]); 0 for ignored rows
//   dh = dlogits @ W (overwrite),  dW += dlogits^T @ h
// With compute = bf16 the backward products take dlogits rounded (via f32) to bf16 as well, the
// same inputs the optimized variant hands to a bf16 GEMM. Rows are processed in chunks small enough
// that the double dlogits of a chunk stay modest; within a chunk every sum is in double.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cross_entropy/checks.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

double round_in(double x, DType compute) {
  return compute == DType::BF16 ? double(bf16_to_f32(f32_to_bf16(float(x)))) : x;
}

// An input as the products see it: its f32 values, or their bf16 roundings (read in place, so the
// reference holds no copy of W).
struct Operand {
  const float* p;
  DType compute;
  double operator[](int64_t i) const { return round_in(p[i], compute); }
};

// logits of row n into out[0, V).
void row_logits(const Operand& h, const Operand& w, const ce_detail::Dims& d, int64_t n,
                double* out) {
  for (int64_t v = 0; v < d.v; ++v) {
    double s = 0;
    for (int64_t k = 0; k < d.h; ++k) s += h[n * d.h + k] * w[v * d.h + k];
    out[v] = s;
  }
}

// logsumexp of a row of V logits.
double logsumexp(const double* z, int64_t V) {
  double m = z[0];
  for (int64_t v = 1; v < V; ++v) m = std::max(m, z[v]);
  double s = 0;
  for (int64_t v = 0; v < V; ++v) s += std::exp(z[v] - m);
  return m + std::log(s);
}

double forward(const ExecContext& ctx, const Tensor& h, const Tensor& w, const Tensor& labels, Tensor* logits_out,
               DType compute) {
  opcheck::host_context(ctx, "cross_entropy.reference");
  const ce_detail::Dims d = ce_detail::check_inputs(h, w, labels, compute);
  if (logits_out) ce_detail::check_logits_out(*logits_out, d);
  const Tensor wf = w.dtype() == DType::F32 ? w : w.to(DType::F32);  // bf16 values: exact in f32
  const Operand hv{h.data<float>(), compute}, wv{wf.data<float>(), compute};
  std::vector<double> z(size_t(d.v));
  double total = 0;
  for (int64_t n = 0; n < d.n; ++n) {
    const int64_t label = opcheck::index_at(labels, n);
    if (label == kIgnoreIndex && !logits_out) continue;
    row_logits(hv, wv, d, n, z.data());
    if (logits_out)
      for (int64_t v = 0; v < d.v; ++v) logits_out->data<float>()[n * d.v + v] = float(z[size_t(v)]);
    if (label != kIgnoreIndex) total += logsumexp(z.data(), d.v) - z[size_t(label)];
  }
  return total;
}

double forward_backward(const ExecContext& ctx, const Tensor& h, const Tensor& w, const Tensor& labels,
                        float grad_scale, Tensor& dh, Tensor& dw, DType compute) {
  opcheck::host_context(ctx, "cross_entropy.reference");
  const ce_detail::Dims d = ce_detail::check_inputs(h, w, labels, compute);
  ce_detail::check_grads(h, w, dh, dw);
  const Tensor wf = w.dtype() == DType::F32 ? w : w.to(DType::F32);  // bf16 values: exact in f32
  const Operand hv{h.data<float>(), compute}, wv{wf.data<float>(), compute};
  const int64_t rows = std::max<int64_t>(1, std::min<int64_t>(d.n, (int64_t(1) << 22) / d.v));
  std::vector<double> dl(size_t(rows * d.v));  // [rows, V] dlogits of the chunk
  float* dhp = dh.data<float>();                // [N, H]
  float* dwp = dw.defined() ? dw.data<float>() : nullptr;  // [V, H]; null: frozen weight
  double total = 0;
  for (int64_t r0 = 0; r0 < d.n; r0 += rows) {
    const int64_t r1 = std::min(d.n, r0 + rows);
    for (int64_t n = r0; n < r1; ++n) {
      double* z = dl.data() + (n - r0) * d.v;
      const int64_t label = opcheck::index_at(labels, n);
      if (label == kIgnoreIndex) {
        std::fill(z, z + d.v, 0.0);
        continue;
      }
      row_logits(hv, wv, d, n, z);
      const double lse = logsumexp(z, d.v);
      total += lse - z[label];
      for (int64_t v = 0; v < d.v; ++v)
        z[v] = round_in(double(grad_scale) * (std::exp(z[v] - lse) - (v == label ? 1.0 : 0.0)), compute);
    }
    for (int64_t n = r0; n < r1; ++n) {  // dh rows: dlogits @ W
      const double* z = dl.data() + (n - r0) * d.v;
      for (int64_t k = 0; k < d.h; ++k) {
        double s = 0;
        for (int64_t v = 0; v < d.v; ++v) s += z[v] * wv[v * d.h + k];
        dhp[n * d.h + k] = float(s);
      }
    }
    for (int64_t v = 0; v < (dwp ? d.v : 0); ++v)  // dW += dlogits^T @ h over the chunk's rows
      for (int64_t k = 0; k < d.h; ++k) {
        double s = dwp[v * d.h + k];
        for (int64_t n = r0; n < r1; ++n) s += dl[size_t((n - r0) * d.v + v)] * hv[n * d.h + k];
        dwp[v * d.h + k] = float(s);
      }
  }
  return total;
}

const CrossEntropyKernel kReference{"reference", forward, forward_backward};

}  // namespace
TITAN_REGISTER_KERNEL(CrossEntropyKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
