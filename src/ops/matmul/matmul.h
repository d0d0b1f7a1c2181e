// GEMM and the linear layer.
//   gemm:   C[M,N] = alpha * op(A) @ op(B) + beta * C (+ R), row-major, op(X) = X or X^T.
//           A and B share one input dtype (f32 or bf16); C is always f32 (f32 accumulation).
//           beta == 0 overwrites C without reading it (BLAS convention: NaN in C is ignored).
//           R (optional, f32 [M,N]): an addend read in the GEMM's epilogue (a residual input).
//   linear: y[M,N] = x[M,K] @ W[N,K]^T (HF nn.Linear without bias), or with a residual input
//           y = x @ W^T + r in the same pass (the decoder layer's "h = x + o_proj(attn)").
//           backward: dx[M,K] = dy @ W (overwrite), dW[N,K] += dy^T @ x (accumulate).
//
// Variants: "reference" (plain loops, double accumulation) and "cpu" (oneDNN matmul primitives,
// cached per shape; chosen by measurement, see bench/gemm/RESULTS.md). The cpu linear's forward
// on at most kGemvMaxRows rows is the decode GEMV instead (gemv.h; also linear variant "gemv").
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "ops/registry.h"

namespace titan {

struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1.f, beta = 0.f;
  const void* a = nullptr;  // op(A) is [m, k]; leading dimension lda (row stride of A as stored)
  int64_t lda = 0;
  const void* b = nullptr;  // op(B) is [k, n]
  int64_t ldb = 0;
  float* c = nullptr;       // [m, n]
  int64_t ldc = 0;
  const float* add = nullptr;  // optional [m, n] addend (f32), rows at ldadd; may not overlap C
  int64_t ldadd = 0;
  DType in_dtype = DType::F32;  // of A and B
};

struct GemmKernel {
  static constexpr const char* op_name = "gemm";
  const char* variant;
  void (*gemm)(const ExecContext& ctx, const GemmArgs& g);  // called by titan::gemm with validated, non-empty arguments
};

// Shapes: x [..., K] (all leading dims flattened into M), W [N, K], y/dy [..., N], dx like x,
// dW [N, K]. y, dx and dW are f32 and must be allocated by the caller.
//
// compute: F32, or BF16 to round x, W and dy to bf16 before the products (f32 accumulation,
// f32 outputs). With compute BF16, any of x, W, dy may instead be given as a BF16 tensor that is
// used as is: this is how a caller passes an already-converted bf16 copy of W (the trainer
// rounds each weight once per step instead of once per call), or a bf16 activation it kept.
// A BF16 input with compute F32 is an error (the product would silently lose precision).
//
// backward: dx is overwritten (skipped when dx is null); dW is accumulated into (skipped when
// dw is null), so gradient accumulation over micro-batches needs no extra buffer.
//
// forward_residual: y = x @ W^T + r with r f32 of y's shape (not y itself): the residual add
// happens in the GEMM's epilogue, so no separate pass reads y again.
struct LinearKernel {
  static constexpr const char* op_name = "linear";
  const char* variant;
  void (*forward_residual)(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* r, Tensor& y,
                           DType compute);
  void (*backward)(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw,
                   DType compute);

  void forward(const ExecContext& ctx, const Tensor& x, const Tensor& w, Tensor& y, DType compute) const {
    forward_residual(ctx, x, w, nullptr, y, compute);
  }
};

// Fills defaults (ld = packed row length), validates, handles the empty cases (m or n == 0:
// nothing; k == 0: C = beta * C) and dispatches to the variant.
void gemm(const ExecContext& ctx, const GemmKernel& k, GemmArgs g);

namespace detail {
// The cpu variant's bf16 GEMM where oneDNN builds no bf16 matmul (cpu.cpp): f32 matmuls on the
// operands widened to f32 in panels of about panel_bytes. Validated, non-empty arguments, as a
// GemmKernel gets them; exposed so that tests run it on every CPU.
void gemm_cpu_bf16_widened(const GemmArgs& g, int64_t panel_bytes);
}  // namespace detail

// The linear layer built on a GEMM kernel (both registered Linear variants are this over their
// own GemmKernel); exposed so that other ops (chunked lm_head, MoE experts) reuse the same math.
void linear_forward_with(const ExecContext& ctx, const GemmKernel& gk, const Tensor& x, const Tensor& w, Tensor& y,
                         DType compute, const Tensor* residual = nullptr);
void linear_backward_with(const ExecContext& ctx, const GemmKernel& gk, const Tensor& x, const Tensor& w,
                          const Tensor& dy, Tensor* dx, Tensor* dw, DType compute);

}  // namespace titan
