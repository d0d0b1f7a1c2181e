// Reference GEMM: the definition, in plain loops with double accumulation.
//   C[i,j] = alpha * sum_p opA[i,p] * opB[p,j] + beta * C[i,j] + R[i,j]   (beta == 0: C is not read;
//   R only when given), rounded to f32 once
//   opA[i,p] = trans_a ? A[p*lda + i] : A[i*lda + p];  opB[p,j] = trans_b ? B[j*ldb + p] : B[p*ldb + j]
// Rows of C are independent, so they are spread over threads; each C element is still summed by
// one thread in a fixed order, so the result does not depend on the thread count.
#include <algorithm>

#include "core/dtype.h"
#include "core/threading.h"
#include "ops/matmul/matmul.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

template <class T>
double load(const T* p, int64_t i);
template <>
double load<float>(const float* p, int64_t i) {
  return double(p[i]);
}
template <>
double load<uint16_t>(const uint16_t* p, int64_t i) {
  return double(bf16_to_f32(p[i]));
}

template <class T>
void gemm_ref_typed(const GemmArgs& g) {
  const T* a = static_cast<const T*>(g.a);
  const T* b = static_cast<const T*>(g.b);
  // Strides of op(A) along (i, p) and of op(B) along (p, j).
  const int64_t a_si = g.trans_a ? 1 : g.lda, a_sp = g.trans_a ? g.lda : 1;
  const int64_t b_sp = g.trans_b ? 1 : g.ldb, b_sj = g.trans_b ? g.ldb : 1;
  const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, g.n * g.k));
  parallel_for(g.m, grain, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      float* crow = g.c + i * g.ldc;
      for (int64_t j = 0; j < g.n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < g.k; ++p) acc += load(a, i * a_si + p * a_sp) * load(b, p * b_sp + j * b_sj);
        double v = double(g.alpha) * acc;
        if (g.beta != 0.f) v += double(g.beta) * double(crow[j]);
        if (g.add) v += double(g.add[i * g.ldadd + j]);
        crow[j] = float(v);
      }
    }
  });
}

void gemm_reference(const ExecContext& ctx, const GemmArgs& g) {
  opcheck::host_context(ctx, "gemm.reference");
  if (g.in_dtype == DType::BF16)
    gemm_ref_typed<uint16_t>(g);
  else
    gemm_ref_typed<float>(g);
}

const GemmKernel kGemmReference{"reference", gemm_reference};

void linear_forward_reference(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* r, Tensor& y,
                              DType compute) {
  opcheck::host_context(ctx, "linear.reference");
  linear_forward_with(ctx, kGemmReference, x, w, y, compute, r);
}
void linear_backward_reference(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                               Tensor* dw, DType compute) {
  opcheck::host_context(ctx, "linear.reference");
  linear_backward_with(ctx, kGemmReference, x, w, dy, dx, dw, compute);
}

const LinearKernel kLinearReference{"reference", linear_forward_reference, linear_backward_reference};

}  // namespace

TITAN_REGISTER_KERNEL(GemmKernel, "reference", DeviceType::CPU, kGemmReference);
TITAN_REGISTER_KERNEL(LinearKernel, "reference", DeviceType::CPU, kLinearReference);

}  // namespace titan
