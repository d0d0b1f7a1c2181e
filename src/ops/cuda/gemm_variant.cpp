// Variants "cuda" of gemm and linear: the project's row-major GEMM (ops/matmul/matmul.h) mapped
// onto the column-major cuBLAS interface (ops/cuda/blas.h) by to_blas(), the one place where that
// mapping is written. Under the emulator the reference kernel runs it (cuBLAS's ld rules checked),
// so the kernel case table tests the mapping; the nvcc build runs cuBLASLt with the same call.
//
// Row-major C[m, n] with ldc is column-major C^T [n, m] with the same ld, and
// C^T = op(B)^T op(A)^T: cuBLAS gets m' = n, n' = m, A' = B (op from trans_b, lda' = ldb),
// B' = A (op from trans_a, ldb' = lda). The addend R rides on the epilogue's C input with beta = 1
// when beta == 0 (the residual add); with beta != 0 as well, R is added by a second kernel.
//
// Registered for DeviceType::CPU (GemmArgs' pointers are host memory, copied through the device per
// call) and DeviceType::CUDA (GemmArgs' pointers are device memory, used as they are; linear's
// tensors on cuda:0 used in place, a host one copied over and back; bf16 rounding on the device).
// On the GPU an empty inner dimension (k == 0) is refused by linear: titan::gemm() handles it on
// the host, which a device C cannot take.
#include "ops/cuda/gemm_variant.h"

#include "core/allocator.h"
#include "core/cuda_emu/cuda.h"
#include "core/dtype.h"
#include "ops/cuda/launch.h"
#include "ops/cuda/staging.h"
#include "ops/matmul/matmul.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

namespace ck = cuda_kernels;

// Elements spanned by a row-major rows x cols matrix with row stride ld.
int64_t span(int64_t rows, int64_t cols, int64_t ld) { return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols; }

// Device memory holding `count` elements of `bytes_each` copied from host p (when in).
struct DevSpan {
  void* d = nullptr;
  size_t bytes = 0;
  DevSpan(const void* p, int64_t count, size_t bytes_each, bool in) : bytes(size_t(count) * bytes_each) {
    if (!p || count == 0) return;
    d = cuda_allocator().allocate(bytes);
    if (in) gpu::copy_to_device(d, p, bytes);
  }
  ~DevSpan() {
    if (d) cuda_allocator().deallocate(d, bytes);
  }
  DevSpan(const DevSpan&) = delete;
  DevSpan& operator=(const DevSpan&) = delete;
};

}  // namespace

ck::BlasGemm to_blas(const GemmArgs& g, const void* a, const void* b, float* c, const float* add) {
  ck::BlasGemm r;
  r.transa = g.trans_b ? ck::BlasOp::T : ck::BlasOp::N;
  r.transb = g.trans_a ? ck::BlasOp::T : ck::BlasOp::N;
  r.m = g.n, r.n = g.m, r.k = g.k;
  r.alpha = g.alpha, r.beta = g.beta;
  r.a = b, r.lda = g.ldb;
  r.b = a, r.ldb = g.lda;
  r.c = c, r.ldc = g.ldc;
  r.d = c, r.ldd = g.ldc;
  if (add && g.beta == 0.f) r.c = add, r.ldc = g.ldadd, r.beta = 1.f;
  r.bf16 = g.in_dtype == DType::BF16;
  return r;
}

namespace {

void gemm_cuda(const ExecContext& ctx, const GemmArgs& g) {
  opcheck::host_context(ctx, "gemm.cuda");  // host tensors, staged
  const size_t in_bytes = g.in_dtype == DType::BF16 ? 2 : 4;
  DevSpan a(g.a, span(g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda), in_bytes, true);
  DevSpan b(g.b, span(g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb), in_bytes, true);
  // C is copied in even when beta == 0: the copy back covers the gaps between its rows (ldc > n).
  DevSpan c(g.c, span(g.m, g.n, g.ldc), sizeof(float), true);
  DevSpan add(g.add, span(g.m, g.n, g.ldadd), sizeof(float), true);
  auto* cd = static_cast<float*>(c.d);
  const auto* addd = static_cast<const float*>(add.d);
  ck::blas_gemm(to_blas(g, a.d, b.d, cd, addd), ctx.gemm_handle, ctx.stream);
  if (addd && g.beta != 0.f) ck::add_rows(cd, g.ldc, addd, g.ldadd, g.m, g.n, ctx.stream);
  gpu::copy_to_host(g.c, cd, c.bytes);
}

const GemmKernel kGemmCuda{"cuda", gemm_cuda};

// The GPU registration: A, B, C and the addend are device pointers.
void gemm_cuda_device(const ExecContext& ctx, const GemmArgs& g) {
  cuda_staging::context<DeviceType::CUDA>(ctx, "gemm.cuda");
  ck::blas_gemm(to_blas(g, g.a, g.b, g.c, g.add), ctx.gemm_handle, ctx.stream);
  if (g.add && g.beta != 0.f) ck::add_rows(g.c, g.ldc, g.add, g.ldadd, g.m, g.n, ctx.stream);
}

const GemmKernel kGemmCudaDevice{"cuda", gemm_cuda_device};

// t on the GPU: itself, or a device copy of a host tensor.
Tensor on_gpu(const ExecContext& ctx, const Tensor& t) {
  return !t.defined() || t.device().type == DeviceType::CUDA ? t : t.to(ctx.device);
}

// A GPU operand as the GEMM reads it: itself, or with compute bf16 an f32 tensor rounded to bf16 on
// the device (linear_forward_with then uses it as it is).
Tensor gemm_operand(const ExecContext& ctx, const Tensor& t, DType compute) {
  if (compute != DType::BF16 || !t.defined() || t.dtype() != DType::F32) return t;
  Tensor b = Tensor::empty(t.shape(), DType::BF16, ctx.device);
  ck::round_bf16(static_cast<const float*>(t.raw()), static_cast<uint16_t*>(b.raw()), t.numel(), ctx.stream);
  return b;
}

// An output computed in device tensor `dev` copied back to host tensor `host` (nothing when `dev` is
// `host` itself, on the GPU).
void copy_back(const Tensor& dev, const Tensor& host) {
  if (dev.defined() && dev.raw() != host.raw()) gpu::copy_to_host(host.raw(), dev.raw(), host.nbytes());
}

void check_inner(const Tensor& w) {
  TITAN_CHECK(!w.defined() || w.ndim() != 2 || w.dim(1) > 0, "linear.cuda: weight ", w.str(),
              " has an empty inner dimension, which the GPU registration does not take");
}

void linear_forward_device(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* r, Tensor& y,
                           DType compute) {
  cuda_staging::context<DeviceType::CUDA>(ctx, "linear.cuda");
  check_inner(w);
  const Tensor xd = on_gpu(ctx, x), wd = on_gpu(ctx, w), rd = r ? on_gpu(ctx, *r) : Tensor();
  Tensor yd = on_gpu(ctx, y);
  linear_forward_with(ctx, kGemmCudaDevice, gemm_operand(ctx, xd, compute), gemm_operand(ctx, wd, compute), yd, compute,
                      r ? &rd : nullptr);
  copy_back(yd, y);
}

void linear_backward_device(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                            Tensor* dw, DType compute) {
  cuda_staging::context<DeviceType::CUDA>(ctx, "linear.cuda");
  check_inner(w);
  const Tensor xd = dw ? on_gpu(ctx, x) : x, wd = dx ? on_gpu(ctx, w) : w, dyd = on_gpu(ctx, dy);
  Tensor dxd = dx ? on_gpu(ctx, *dx) : Tensor(), dwd = dw ? on_gpu(ctx, *dw) : Tensor();
  linear_backward_with(ctx, kGemmCudaDevice, dw ? gemm_operand(ctx, xd, compute) : xd,
                       dx ? gemm_operand(ctx, wd, compute) : wd, gemm_operand(ctx, dyd, compute), dx ? &dxd : nullptr,
                       dw ? &dwd : nullptr, compute);
  if (dx) copy_back(dxd, *dx);
  if (dw) copy_back(dwd, *dw);
}

const LinearKernel kLinearCudaDevice{"cuda", linear_forward_device, linear_backward_device};

void linear_forward(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* r, Tensor& y,
                    DType compute) {
  opcheck::host_context(ctx, "linear.cuda");  // host tensors, staged
  linear_forward_with(ctx, kGemmCuda, x, w, y, compute, r);
}
void linear_backward(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw,
                     DType compute) {
  opcheck::host_context(ctx, "linear.cuda");  // host tensors, staged
  linear_backward_with(ctx, kGemmCuda, x, w, dy, dx, dw, compute);
}

const LinearKernel kLinearCuda{"cuda", linear_forward, linear_backward};

}  // namespace
TITAN_REGISTER_KERNEL(GemmKernel, "cuda", DeviceType::CPU, kGemmCuda);
TITAN_REGISTER_KERNEL(LinearKernel, "cuda", DeviceType::CPU, kLinearCuda);
TITAN_REGISTER_KERNEL(GemmKernel, "cuda", DeviceType::CUDA, kGemmCudaDevice);
TITAN_REGISTER_KERNEL(LinearKernel, "cuda", DeviceType::CUDA, kLinearCudaDevice);
}  // namespace titan
