// Residual add, cpu variant: one vectorized pass, split in fixed 32K-element chunks over threads
// (elementwise, so the result is independent of the thread count).
#include "core/threading.h"
#include "ops/op_checks.h"
#include "ops/residual/residual.h"

namespace titan {
namespace {

constexpr int64_t kGrain = 32768;

void forward(const ExecContext& ctx, const Tensor& a, const Tensor& b, Tensor& y) {
  opcheck::host_context(ctx, "residual.cpu");
  opcheck::f32(a, "residual", "a");
  opcheck::f32(b, "residual", "b");
  opcheck::f32(y, "residual", "y");
  opcheck::numel(b, a.numel(), "residual", "b");
  opcheck::numel(y, a.numel(), "residual", "y");
  const float* ap = a.data<float>();
  const float* bp = b.data<float>();
  float* yp = y.data<float>();  // may alias a (or b): every element is read before it is written
  parallel_for(a.numel(), kGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) yp[i] = ap[i] + bp[i];
  });
}

void accumulate(const ExecContext& ctx, Tensor& dst, const Tensor& src) {
  opcheck::host_context(ctx, "residual.cpu");
  opcheck::f32(dst, "residual", "dst");
  opcheck::f32(src, "residual", "src");
  opcheck::numel(src, dst.numel(), "residual", "src");
  float* __restrict d = dst.data<float>();
  const float* __restrict s = src.data<float>();
  parallel_for(dst.numel(), kGrain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) d[i] += s[i];
  });
}

const ResidualKernel kCpu{"cpu", forward, accumulate};

}  // namespace
TITAN_REGISTER_KERNEL(ResidualKernel, "cpu", DeviceType::CPU, kCpu);
}  // namespace titan
