// The single-source CUDA kernels (ops/cuda/*.cuh) compiled by the host compiler against the grid
// emulator (core/cuda_emu): the definitions of ops/cuda/launch.h in every build. kernels.cu
// compiles the same headers with nvcc (the TITAN_CUDA build gate, cmake/cuda.cmake).
#ifndef TITAN_CUDA_RUNTIME  // a GPU build: the kernels come from kernels.cu (nvcc)
#include "core/cuda_emu/cuda.h"
#include "core/error.h"
#include "ops/cuda/adamw.cuh"
#include "ops/cuda/attention.cuh"
#include "ops/cuda/causal_conv1d.cuh"
#include "ops/cuda/cross_entropy.cuh"
#include "ops/cuda/elementwise.cuh"
#include "ops/cuda/embedding.cuh"
#include "ops/cuda/foreach.cuh"
#include "ops/cuda/gated_delta.cuh"
#include "ops/cuda/gated_rmsnorm.cuh"
#include "ops/cuda/gemm_ref.cuh"
#include "ops/cuda/moe.cuh"
#include "ops/cuda/rmsnorm.cuh"
#include "ops/cuda/rope.cuh"
#include "ops/cuda/swiglu.cuh"

namespace titan::cuda_kernels {

// cuBLAS's argument rules, then the reference kernel (the nvcc build calls cuBLASLt instead).
void blas_gemm(const BlasGemm& g, void* handle, void* stream) {
  (void)handle;
  const char* bad = check_blas(g);
  if (*bad) fail("blas_gemm: ", bad, " (m=", g.m, " n=", g.n, " k=", g.k, " lda=", g.lda, " ldb=", g.ldb, " ldc=", g.ldc,
                 " ldd=", g.ldd, ")");
  blas_gemm_reference(g, stream);
}

}  // namespace titan::cuda_kernels
#endif  // TITAN_CUDA_RUNTIME
