// GEMM and the linear layer.
//   gemm:   C[M,N] = alpha * op(A) @ op(B) + beta * C, row-major, op(X) = X or X^T.
//           A and B share one input dtype (f32 or bf16); C is always f32 (f32 accumulation).
//   linear: y[M,N] = x[M,K] @ W[N,K]^T (HF nn.Linear without bias).
//           backward: dx[M,K] = dy @ W (overwrite), dW[N,K] += dy^T @ x (accumulate).
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
  DType in_dtype = DType::F32;  // of A and B
};

struct GemmKernel {
  static constexpr const char* op_name = "gemm";
  const char* variant;
  void (*gemm)(const GemmArgs& g);
};

struct LinearKernel {
  static constexpr const char* op_name = "linear";
  const char* variant;
  // compute: F32, or BF16 to round x and W to bf16 before the product (f32 accumulation).
  void (*forward)(const Tensor& x, const Tensor& w, Tensor& y, DType compute);
  void (*backward)(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw, DType compute);
};

// Fills defaults (ld = packed row length) and dispatches to the variant.
void gemm(const GemmKernel& k, GemmArgs g);

}  // namespace titan
