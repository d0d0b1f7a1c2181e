// blas_gemm over cuBLASLt (nvcc build only; ops/cuda/blas.h has the rules): one matmul
// descriptor per call (f32 compute, or TF32 fast mode; f32 scale), layouts of the stored A, B
// (bf16 or f32) and of C, D (f32), the heuristic's algorithm, no workspace. Compiled by the
// TITAN_CUDA gate; run only on a GPU (bench/cuda/device_check.sh).
#pragma once
#include <cublasLt.h>

#include "core/error.h"
#include "ops/cuda/blas.h"

namespace titan::cuda_kernels {

namespace cublaslt_detail {
inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) fail("cublasLt: ", what, " failed with status ", int(s));
}
// Destroys the descriptors at scope end.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  ~Descs() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};
// The process's cuBLASLt handle, for callers whose execution context has none.
inline cublasLtHandle_t default_handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t made = nullptr;
    check(cublasLtCreate(&made), "cublasLtCreate");
    return made;
  }();
  return h;
}
}  // namespace cublaslt_detail

void blas_gemm(const BlasGemm& g, void* handle, void* stream) {
  using cublaslt_detail::check;
  const char* bad = check_blas(g);
  if (*bad) fail("blas_gemm: ", bad);
  if (g.m == 0 || g.n == 0) return;
  if (!handle) handle = cublaslt_detail::default_handle();
  cublaslt_detail::Descs ds;
  check(cublasLtMatmulDescCreate(&ds.op, g.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F),
        "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = g.transa == BlasOp::N ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t tb = g.transb == BlasOp::N ? CUBLAS_OP_N : CUBLAS_OP_T;
  check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "set TRANSA");
  check(cublasLtMatmulDescSetAttribute(ds.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "set TRANSB");
  const cudaDataType_t in = g.bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const uint64_t a_rows = uint64_t(g.transa == BlasOp::N ? g.m : g.k), a_cols = uint64_t(g.transa == BlasOp::N ? g.k : g.m);
  const uint64_t b_rows = uint64_t(g.transb == BlasOp::N ? g.k : g.n), b_cols = uint64_t(g.transb == BlasOp::N ? g.n : g.k);
  check(cublasLtMatrixLayoutCreate(&ds.a, in, a_rows, a_cols, g.lda), "layout A");
  check(cublasLtMatrixLayoutCreate(&ds.b, in, b_rows, b_cols, g.ldb), "layout B");
  check(cublasLtMatrixLayoutCreate(&ds.d, CUDA_R_32F, uint64_t(g.m), uint64_t(g.n), g.ldd), "layout D");
  const bool has_c = g.beta != 0.0f;
  check(cublasLtMatrixLayoutCreate(&ds.c, CUDA_R_32F, uint64_t(g.m), uint64_t(g.n), has_c ? g.ldc : g.ldd),
        "layout C");
  check(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle), ds.op, &g.alpha, g.a, ds.a, g.b, ds.b, &g.beta,
                       has_c ? static_cast<const void*>(g.c) : static_cast<const void*>(g.d), ds.c, g.d, ds.d, nullptr,
                       nullptr, 0, static_cast<cudaStream_t>(stream)),
        "cublasLtMatmul");
}

}  // namespace titan::cuda_kernels
