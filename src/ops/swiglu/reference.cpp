// SwiGLU, reference variant, in double:
//   out = silu(g) * u,  silu(g) = g * sigmoid(g)
//   dg = dout * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  du = dout * silu(g)
#include <cmath>

#include "core/dtype.h"
#include "ops/op_checks.h"
#include "ops/swiglu/checks.h"
#include "ops/swiglu/swiglu.h"

namespace titan {
namespace {

double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

// Element i of an f32 or BF16 output.
void store(const Tensor& t, int64_t i, float v) {
  if (t.dtype() == DType::BF16)
    static_cast<uint16_t*>(t.raw())[i] = f32_to_bf16(v);
  else
    t.data<float>()[i] = v;
}

void forward(const ExecContext& ctx, const Tensor& gu, Tensor& out) {
  opcheck::host_context(ctx, "swiglu.reference");
  const auto [N, I] = swiglu_detail::check(gu, out, "out", true);
  const float* in = gu.data<float>();  // [N, 2I]
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < I; ++j) {
      const double g = in[n * 2 * I + j], u = in[n * 2 * I + I + j];
      store(out, n * I + j, float(g * sigmoid(g) * u));  // out [N, I]
    }
}

void backward(const ExecContext& ctx, const Tensor& gu, const Tensor& dout, Tensor& dgu) {
  opcheck::host_context(ctx, "swiglu.reference");
  const auto [N, I] = swiglu_detail::check(gu, dout, "dout");
  swiglu_detail::check_dgu(gu, dgu);
  const float* in = gu.data<float>();   // [N, 2I]
  const float* dy = dout.data<float>(); // [N, I]
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < I; ++j) {
      const double g = in[n * 2 * I + j], u = in[n * 2 * I + I + j], dyv = dy[n * I + j];
      const double s = sigmoid(g);
      const float dg = float(dyv * u * s * (1.0 + g * (1.0 - s))), du = float(dyv * g * s);
      store(dgu, n * 2 * I + j, dg);  // dgu [N, 2I]; gu is read before (they may alias when f32)
      store(dgu, n * 2 * I + I + j, du);
    }
}

const SwiGLUKernel kReference{"reference", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(SwiGLUKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
