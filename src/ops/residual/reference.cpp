// Residual add, reference variant: y = a + b elementwise (the sum of two floats computed in double
// and rounded once is the correctly rounded f32 sum, so this is exact f32 addition).
#include "ops/op_checks.h"
#include "ops/residual/residual.h"

namespace titan {
namespace {

void forward(const ExecContext& ctx, const Tensor& a, const Tensor& b, Tensor& y) {
  opcheck::host_context(ctx, "residual.reference");
  opcheck::f32(a, "residual", "a");
  opcheck::f32(b, "residual", "b");
  opcheck::f32(y, "residual", "y");
  opcheck::numel(b, a.numel(), "residual", "b");
  opcheck::numel(y, a.numel(), "residual", "y");
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  float* yp = y.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) yp[i] = float(double(ap[i]) + double(bp[i]));
}

void accumulate(const ExecContext& ctx, Tensor& dst, const Tensor& src) {
  opcheck::host_context(ctx, "residual.reference");
  opcheck::f32(dst, "residual", "dst");
  opcheck::f32(src, "residual", "src");
  opcheck::numel(src, dst.numel(), "residual", "src");
  float* d = dst.data<float>();
  const float* s = src.data<float>();
  for (int64_t i = 0; i < dst.numel(); ++i) d[i] = float(double(d[i]) + double(s[i]));
}

const ResidualKernel kReference{"reference", forward, accumulate};

}  // namespace
TITAN_REGISTER_KERNEL(ResidualKernel, "reference", DeviceType::CPU, kReference);
}  // namespace titan
