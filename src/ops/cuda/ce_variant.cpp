// Variant "cuda" of the fused lm_head + cross-entropy (ops/cross_entropy/cross_entropy.h): in
// chunks of rows, logits Z = h W^T by one GEMM (blas_gemm through to_blas), the softmax rows by
// ce_rows (ops/cuda/cross_entropy.cuh), then dh = dZ W and dW += dZ^T h by two more GEMMs, so the
// [N, V] logits are never held whole. compute = bf16: h, W and dZ are rounded to bf16 bits on the
// device and the GEMMs take bf16 inputs (f32 accumulation), the points where the reference rounds.
// The loss is the sum of the per-row losses in row order, in double on the host.
// Registered for DeviceType::CPU (host tensors, staged) and DeviceType::CUDA (h, W, labels, dh, dW
// and logits_out on cuda:0 used in place; a host one staged all the same). Either way only the
// per-row losses come back to the host (and the labels, for their range check, from the GPU).
#include <algorithm>
#include <vector>

#include "core/cuda_emu/cuda.h"
#include "core/dtype.h"
#include "ops/cross_entropy/checks.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/cuda/gemm_variant.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/staging.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

namespace ck = cuda_kernels;

// Device scratch, or a copy of host bytes (from the CUDA caching allocator).
using Buf = cuda_staging::Staged;

// Row-major C[m, n] (ldc) = op(A) op(B) + beta C on device pointers, through the mapping.
void gemm_rm(const ExecContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
             const void* b, int64_t ldb, float beta, float* c, int64_t ldc, bool bf16) {
  if (m == 0 || n == 0) return;
  GemmArgs g;
  g.trans_a = ta, g.trans_b = tb, g.m = m, g.n = n, g.k = k, g.alpha = 1.f, g.beta = beta;
  g.lda = lda, g.ldb = ldb, g.ldc = ldc, g.in_dtype = bf16 ? DType::BF16 : DType::F32;
  ck::blas_gemm(to_blas(g, a, b, c, nullptr), ctx.gemm_handle, ctx.stream);
}

// The device operands of one call.
struct Operands {
  ce_detail::Dims d;
  bool bf16;
  Buf h, w, labels;
  Buf h16, w16;  // bf16 bits of h and W (compute bf16)
  const int64_t* l64;
  const int32_t* l32;
  Operands(const ExecContext& ctx, const Tensor& ht, const Tensor& wt, const Tensor& lt, const ce_detail::Dims& dims,
           DType compute)
      : d(dims),
        bf16(compute == DType::BF16),
        h(ht, true),
        w(wt, true),
        labels(lt, true),
        h16(bf16 ? size_t(d.n * d.h) * 2 : 0),
        w16(bf16 && wt.dtype() == DType::F32 ? size_t(d.v * d.h) * 2 : 0),
        l64(lt.dtype() == DType::I64 ? labels.as<int64_t>() : nullptr),
        l32(lt.dtype() == DType::I64 ? nullptr : labels.as<int32_t>()) {
    if (!bf16) return;
    ck::round_bf16(h.as<float>(), h16.as<uint16_t>(), d.n * d.h, ctx.stream);
    if (wt.dtype() == DType::F32) ck::round_bf16(w.as<float>(), w16.as<uint16_t>(), d.v * d.h, ctx.stream);
  }
  const void* h_in(int64_t row) const {
    return bf16 ? static_cast<const void*>(h16.as<uint16_t>() + row * d.h) : h.as<float>() + row * d.h;
  }
  const void* w_in() const { return bf16 ? (w16.as<void>() ? w16.as<void>() : w.as<void>()) : w.as<void>(); }
};

int64_t chunk_rows(const ce_detail::Dims& d) {
  return std::max<int64_t>(1, std::min<int64_t>(d.n, (int64_t(1) << 22) / d.v));
}

// The labels where the host can read them for the range check: a host copy of GPU labels.
Tensor host_labels(const Tensor& labels) {
  return labels.defined() && labels.device().type == DeviceType::CUDA ? labels.to(cpu()) : labels;
}

template <DeviceType Dev>
double forward(const ExecContext& ctx, const Tensor& h, const Tensor& w, const Tensor& labels, Tensor* logits_out,
               DType compute) {
  cuda_staging::context<Dev>(ctx, "cross_entropy.cuda");
  const ce_detail::Dims d = ce_detail::check_inputs(h, w, host_labels(labels), compute);
  if (logits_out) ce_detail::check_logits_out(*logits_out, d);
  if (d.n == 0) return 0.0;
  Operands o(ctx, h, w, labels, d, compute);
  const int64_t rows = chunk_rows(d);
  Buf z(size_t(rows * d.v) * 4), loss(size_t(rows) * 4);
  std::vector<float> host_loss(static_cast<size_t>(rows));
  double total = 0;
  for (int64_t r0 = 0; r0 < d.n; r0 += rows) {
    const int64_t rc = std::min(rows, d.n - r0);
    gemm_rm(ctx, false, true, rc, d.v, d.h, o.h_in(r0), d.h, o.w_in(), d.h, 0.f, z.as<float>(), d.v, o.bf16);
    if (logits_out) {
      float* dst = static_cast<float*>(logits_out->raw()) + r0 * d.v;
      if (logits_out->device().type == DeviceType::CUDA)
        gpu::copy_device(dst, z.as<void>(), size_t(rc * d.v) * 4);
      else
        gpu::copy_to_host(dst, z.as<void>(), size_t(rc * d.v) * 4);
    }
    ck::ce_rows(z.as<float>(), rc, d.v, o.l64, o.l32, r0, loss.as<float>(), false, 0.f, nullptr, ctx.stream);
    gpu::copy_to_host(host_loss.data(), loss.as<void>(), size_t(rc) * 4);
    for (int64_t r = 0; r < rc; ++r) total += host_loss[size_t(r)];
  }
  return total;
}

template <DeviceType Dev>
double forward_backward(const ExecContext& ctx, const Tensor& h, const Tensor& w, const Tensor& labels,
                        float grad_scale, Tensor& dh, Tensor& dw, DType compute) {
  cuda_staging::context<Dev>(ctx, "cross_entropy.cuda");
  const ce_detail::Dims d = ce_detail::check_inputs(h, w, host_labels(labels), compute);
  ce_detail::check_grads(h, w, dh, dw);
  if (d.n == 0) return 0.0;
  Operands o(ctx, h, w, labels, d, compute);
  const int64_t rows = chunk_rows(d);
  Buf z(size_t(rows * d.v) * 4), z16(o.bf16 ? size_t(rows * d.v) * 2 : 0), loss(size_t(rows) * 4);
  Buf dhd(dh, false), dwd(dw, true);  // dh overwritten, dW accumulated into
  std::vector<float> host_loss(static_cast<size_t>(rows));
  double total = 0;
  for (int64_t r0 = 0; r0 < d.n; r0 += rows) {
    const int64_t rc = std::min(rows, d.n - r0);
    gemm_rm(ctx, false, true, rc, d.v, d.h, o.h_in(r0), d.h, o.w_in(), d.h, 0.f, z.as<float>(), d.v, o.bf16);
    ck::ce_rows(z.as<float>(), rc, d.v, o.l64, o.l32, r0, loss.as<float>(), true, grad_scale,
                o.bf16 ? z16.as<uint16_t>() : nullptr, ctx.stream);
    gpu::copy_to_host(host_loss.data(), loss.as<void>(), size_t(rc) * 4);
    for (int64_t r = 0; r < rc; ++r) total += host_loss[size_t(r)];
    const void* dz = o.bf16 ? z16.as<void>() : z.as<void>();
    // dh[r0:r0+rc] = dZ [rc, V] @ W [V, H];  dW [V, H] += dZ^T @ h[r0:r0+rc]
    gemm_rm(ctx, false, false, rc, d.h, d.v, dz, d.v, o.w_in(), d.h, 0.f, dhd.as<float>() + r0 * d.h, d.h, o.bf16);
    if (dwd.as<void>()) gemm_rm(ctx, true, false, d.v, d.h, rc, dz, d.v, o.h_in(r0), d.h, 1.f, dwd.as<float>(), d.h, o.bf16);
  }
  dhd.to_host();
  dwd.to_host();
  return total;
}

template <DeviceType Dev>
const CrossEntropyKernel kCrossEntropyCuda{"cuda", forward<Dev>, forward_backward<Dev>};

}  // namespace
TITAN_REGISTER_KERNEL(CrossEntropyKernel, "cuda", DeviceType::CPU, kCrossEntropyCuda<DeviceType::CPU>);
TITAN_REGISTER_KERNEL(CrossEntropyKernel, "cuda", DeviceType::CUDA, kCrossEntropyCuda<DeviceType::CUDA>);
}  // namespace titan
