// The linear layer over any GEMM kernel (row-major, W stored [N, K] as in HF nn.Linear):
//   forward  y[M,N]  = x[M,K] @ W^T (+ r) gemm NT: A = x,  B = W  (trans_b), addend r
//   backward dx[M,K] = dy[M,N] @ W       gemm NN: A = dy, B = W, beta = 0
//            dW[N,K] += dy^T @ x[M,K]    gemm TN: A = dy (trans_a), B = x, beta = 1
// With compute BF16 the three inputs are rounded to bf16 first (unless given as bf16 already).
#include "core/error.h"
#include "ops/matmul/bf16_convert.h"
#include "ops/matmul/matmul.h"

namespace titan {
namespace {

// Rows of a [..., cols] tensor, checking the last dimension.
int64_t rows_of(const Tensor& t, int64_t cols, const char* what) {
  TITAN_CHECK(t.defined() && t.ndim() >= 1, "linear: ", what, " is undefined or a scalar");
  TITAN_CHECK(t.dim(-1) == cols, "linear: ", what, " ", t.str(), " must have last dimension ", cols);
  return t.numel() / cols;
}

void check_f32_out(const Tensor& t, const Shape& want, const char* what) {
  TITAN_CHECK(t.defined() && t.dtype() == DType::F32 && shape_numel(t.shape()) == shape_numel(want) &&
                  t.dim(-1) == want.back(),
              "linear: ", what, " must be f32 with shape ", shape_str(want), ", got ", t.defined() ? t.str() : "none");
}

// The operand as the GEMM will read it: f32 for compute F32, bf16 (converted when needed) for BF16.
Tensor operand(const Tensor& t, DType compute, const char* what) {
  if (compute == DType::F32) {
    TITAN_CHECK(t.dtype() == DType::F32, "linear: ", what, " is ", t.str(),
                " but compute is f32 (pass f32 inputs, or choose bf16 compute)");
    return t;
  }
  TITAN_CHECK(compute == DType::BF16, "linear: compute dtype must be f32 or bf16, got ", dtype_name(compute));
  return to_bf16(t);
}

// The f32 memory of a checked f32 output or addend: a device pointer when it lives on the GPU (the
// GPU registration of a GEMM kernel takes device pointers).
float* f32_ptr(const Tensor& t) { return static_cast<float*>(t.raw()); }

}  // namespace

void linear_forward_with(const ExecContext& ctx, const GemmKernel& gk, const Tensor& x, const Tensor& w, Tensor& y,
                         DType compute, const Tensor* residual) {
  TITAN_CHECK(w.defined() && w.ndim() == 2, "linear: weight must be 2-D [out, in], got ", w.defined() ? w.str() : "none");
  const int64_t n = w.dim(0), k = w.dim(1), m = rows_of(x, k, "input");
  Shape yshape = x.shape();
  yshape.back() = n;
  check_f32_out(y, yshape, "output");
  if (residual) {
    check_f32_out(*residual, yshape, "residual input");
    TITAN_CHECK(residual->storage() != y.storage() || residual->raw() != y.raw(), "linear: the residual input must not ",
                "be the output itself");
  }
  Tensor xa = operand(x, compute, "input"), wa = operand(w, compute, "weight");
  GemmArgs g;
  g.trans_b = true;
  g.m = m, g.n = n, g.k = k;
  g.a = xa.raw(), g.b = wa.raw(), g.c = f32_ptr(y);
  if (residual) g.add = f32_ptr(*residual);
  g.in_dtype = xa.dtype();
  gemm(ctx, gk, g);
}

void linear_backward_with(const ExecContext& ctx, const GemmKernel& gk, const Tensor& x, const Tensor& w,
                          const Tensor& dy, Tensor* dx, Tensor* dw, DType compute) {
  TITAN_CHECK(w.defined() && w.ndim() == 2, "linear: weight must be 2-D [out, in], got ", w.defined() ? w.str() : "none");
  const int64_t n = w.dim(0), k = w.dim(1);
  const int64_t m = rows_of(dy, n, "output gradient");
  Tensor dya = operand(dy, compute, "output gradient");
  if (dx) {
    Shape want = dy.shape();
    want.back() = k;
    check_f32_out(*dx, want, "input gradient");
    Tensor wa = operand(w, compute, "weight");
    GemmArgs g;
    g.m = m, g.n = k, g.k = n;
    g.a = dya.raw(), g.b = wa.raw(), g.c = f32_ptr(*dx);
    g.in_dtype = dya.dtype();
    gemm(ctx, gk, g);
  }
  if (dw) {
    TITAN_CHECK(rows_of(x, k, "input") == m, "linear: input ", x.str(), " and output gradient ", dy.str(),
                " disagree on the number of rows");
    check_f32_out(*dw, {n, k}, "weight gradient");
    TITAN_CHECK(dw->ndim() == 2, "linear: weight gradient must be 2-D, got ", dw->str());
    Tensor xa = operand(x, compute, "input");
    GemmArgs g;
    g.trans_a = true;
    g.m = n, g.n = k, g.k = m;
    g.beta = 1.f;
    g.a = dya.raw(), g.b = xa.raw(), g.c = f32_ptr(*dw);
    g.in_dtype = xa.dtype();
    gemm(ctx, gk, g);
  }
}

}  // namespace titan
