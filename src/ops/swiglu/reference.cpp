// SwiGLU, reference variant, in double:
//   out = silu(g) * u,  silu(g) = g * sigmoid(g)
//   dg = dout * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))),  du = dout * silu(g)
#include <cmath>

#include "ops/swiglu/checks.h"
#include "ops/swiglu/swiglu.h"

namespace titan {
namespace {

double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

void forward(const Tensor& gu, Tensor& out) {
  const auto [N, I] = swiglu_detail::check(gu, out, "out");
  const float* in = gu.data<float>();  // [N, 2I]
  float* y = out.data<float>();        // [N, I]
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < I; ++j) {
      const double g = in[n * 2 * I + j], u = in[n * 2 * I + I + j];
      y[n * I + j] = float(g * sigmoid(g) * u);
    }
}

void backward(const Tensor& gu, const Tensor& dout, Tensor& dgu) {
  const auto [N, I] = swiglu_detail::check(gu, dout, "dout");
  opcheck::f32(dgu, "swiglu", "dgu");
  opcheck::same_shape(dgu, gu, "swiglu", "dgu", "gu");
  const float* in = gu.data<float>();   // [N, 2I]
  const float* dy = dout.data<float>(); // [N, I]
  float* d = dgu.data<float>();         // [N, 2I]
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < I; ++j) {
      const double g = in[n * 2 * I + j], u = in[n * 2 * I + I + j], dyv = dy[n * I + j];
      const double s = sigmoid(g);
      d[n * 2 * I + j] = float(dyv * u * s * (1.0 + g * (1.0 - s)));
      d[n * 2 * I + I + j] = float(dyv * g * s);
    }
}

const SwiGLUKernel kReference{"reference", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(SwiGLUKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
