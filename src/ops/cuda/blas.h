// The GPU GEMM interface in cuBLAS terms (column-major), so that the project's row-major GEMM
// (ops/matmul/matmul.h) is mapped onto cuBLASLt exactly once (to_blas(), gemm_variant.cpp) and
// that mapping is what the emulator build tests:
//   D[m x n] = alpha * op(A)[m x k] * op(B)[k x n] + beta * C[m x n]    (column-major, element
//   (i, j) of X at X[i + j * ldx]; op(X) = X or X^T; A stored m x k (N) or k x m (T), lda >= its
//   rows; likewise B; C and D m x n with ldc, ldd >= m; C may be D, or another matrix: the epilogue
//   input, which is how a residual add rides on beta = 1).
// A and B are f32 or bf16 (bits), accumulation is f32, C and D are f32; tf32: inputs rounded to
// TF32 (cuBLASLt's CUBLAS_COMPUTE_32F_FAST_TF32) for f32 inputs.
// nvcc build: cuBLASLt (gemm_cublaslt.cuh). Emulator build: a tiled reference kernel that follows
// the same rules (gemm_ref.cuh); check_blas() refuses what cuBLAS refuses (CUBLAS_STATUS_INVALID_VALUE).
#pragma once
#include <cstdint>

namespace titan::cuda_kernels {

enum class BlasOp : uint8_t { N, T };

struct BlasGemm {
  BlasOp transa = BlasOp::N, transb = BlasOp::N;
  int64_t m = 0, n = 0, k = 0;
  float alpha = 1, beta = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  const float* c = nullptr;  // epilogue input (read only when beta != 0)
  int64_t ldc = 0;
  float* d = nullptr;  // output
  int64_t ldd = 0;
  bool bf16 = false;  // A and B are bf16 bits (else f32)
  bool tf32 = false;  // f32 inputs rounded to TF32
};

// "" when cuBLAS would accept the arguments, else the reason.
const char* check_blas(const BlasGemm& g);
// Runs the GEMM on `stream` (cudaStream_t) with `handle` (cublasLtHandle_t; null under the emulator).
void blas_gemm(const BlasGemm& g, void* handle, void* stream);

#ifndef TITAN_CUDA_RUNTIME
// Emulator build: the two forms blas_gemm chooses between. The tiled reference kernel
// (gemm_ref.cuh) runs on the emulator's fibers; the host form computes the same products bit for
// bit (each D(i, j) sums op(A)(i, l) op(B)(l, j) over l in order in f32 fused multiply-adds, then
// alpha and the beta term) on host threads, eight output rows to a vector,
// a hundred or more times faster. blas_gemm takes the host form from kEmuHostGemmWork
// multiply-adds, so that whole training steps run under the emulator (the lm_head's GEMMs are
// billions of them) while the kernel tests' small shapes keep the kernel.
inline constexpr int64_t kEmuHostGemmWork = int64_t(1) << 20;
void blas_gemm_reference(const BlasGemm& g, void* stream);
void blas_gemm_host(const BlasGemm& g);
#endif

}  // namespace titan::cuda_kernels
