// output_gate_forward / output_gate_backward on the CPU (output_gate.h).
#include "ops/attention/output_gate.h"

#include <cmath>

#include "core/threading.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

float sigmoid(float z) { return 1.0f / (1.0f + std::exp(-z)); }

// Checks the device and that every tensor is f32 [T, Q] like attn; returns T.
int64_t check(const ExecContext& ctx, const char* who, const Tensor& attn, std::initializer_list<const Tensor*> ts) {
  opcheck::host_context(ctx, who);
  TITAN_CHECK(attn.defined() && attn.dtype() == DType::F32 && attn.ndim() == 2, who, ": attn must be f32 [T, Q], got ",
              attn.defined() ? attn.str() : std::string("an undefined tensor"));
  for (const Tensor* t : ts)
    TITAN_CHECK(t->defined() && t->dtype() == DType::F32 && t->shape() == attn.shape(), who, ": ",
                t->defined() ? t->str() : std::string("an undefined tensor"), " does not match attn ", attn.str());
  return attn.dim(0);
}

}  // namespace

void output_gate_forward(const ExecContext& ctx, const Tensor& attn, Tensor& gate) {
  const int64_t T = check(ctx, "output_gate_forward", attn, {&gate}), Q = attn.dim(1);
  const float* at = attn.data<float>();
  float* g = gate.data<float>();
  parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t i = t0 * Q; i < t1 * Q; ++i) g[i] = at[i] * sigmoid(g[i]);
  });
}

void output_gate_backward(const ExecContext& ctx, const Tensor& attn, const Tensor& gate, const Tensor& dgated,
                          Tensor& dattn, Tensor& dgate) {
  const int64_t T = check(ctx, "output_gate_backward", attn, {&gate, &dgated, &dattn, &dgate}), Q = attn.dim(1);
  const float* at = attn.data<float>();
  const float* z = gate.data<float>();
  const float* dg = dgated.data<float>();
  float* da = dattn.data<float>();
  float* dz = dgate.data<float>();
  parallel_for(T, 16, [&](int64_t t0, int64_t t1) {
    for (int64_t i = t0 * Q; i < t1 * Q; ++i) {
      const float sg = sigmoid(z[i]);
      da[i] = dg[i] * sg;
      dz[i] = dg[i] * at[i] * sg * (1.0f - sg);
    }
  });
}

}  // namespace titan
