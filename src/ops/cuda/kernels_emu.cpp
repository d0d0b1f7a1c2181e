// The single-source CUDA kernels (ops/cuda/*.cuh) compiled by the host compiler against the grid
// emulator (core/cuda_emu): the definitions of ops/cuda/launch.h in every build. kernels.cu
// compiles the same headers with nvcc (the TITAN_CUDA build gate, cmake/cuda.cmake).
#ifndef TITAN_CUDA_RUNTIME  // a GPU build: the kernels come from kernels.cu (nvcc)
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/cuda_emu/cuda.h"
#include "core/error.h"
#ifdef _OPENMP  // the ASan emulator test builds this file without OpenMP: its host GEMM runs serially
#include "core/threading.h"
#endif
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
  if (g.m * g.n * g.k >= kEmuHostGemmWork) return blas_gemm_host(g);
  blas_gemm_reference(g, stream);
}

namespace {
// fn(begin, end) over [0, n) in chunks of `grain`: on the OpenMP team when there is one.
template <class F>
void host_chunks(int64_t n, int64_t grain, F&& fn) {
#ifdef _OPENMP
  parallel_for(n, grain, fn);
#else
  for (int64_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain));
#endif
}
}  // namespace

void blas_gemm_host(const BlasGemm& g) {
  if (g.m == 0 || g.n == 0) return;
  // The kernel's zero padding of k to whole tiles adds +0 products to a sum that starts at +0, which
  // changes no bits, so the host form stops at k.
  const int64_t k = g.k;
  // op(B) column by column, as the kernel reads it (bf16 widened, TF32 rounded): pb[j * k + l].
  std::vector<float> pb(size_t(k * g.n));
  host_chunks(g.n, 16, [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j)
      for (int64_t l = 0; l < k; ++l) pb[size_t(j * k + l)] = load_op(g.b, g.bf16, g.transb, l, j, g.ldb, g.tf32);
  });
  constexpr int64_t kRows = 64;  // op(A) rows per task, eight vectors of accumulators
  host_chunks((g.m + kRows - 1) / kRows, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> pa(size_t(k * kRows));  // pa[l * kRows + r] = op(A)(i0 + r, l), zero past m
    alignas(32) float sum[kRows];
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t i0 = blk * kRows, rows = std::min(kRows, g.m - i0);
      for (int64_t l = 0; l < k; ++l)
        for (int64_t r = 0; r < kRows; ++r)
          pa[size_t(l * kRows + r)] = r < rows ? load_op(g.a, g.bf16, g.transa, i0 + r, l, g.lda, g.tf32) : 0.0f;
      for (int64_t j = 0; j < g.n; ++j) {
        __m256 acc[kRows / 8];
        for (auto& a : acc) a = _mm256_setzero_ps();
        const float* bj = pb.data() + j * k;
        for (int64_t l = 0; l < k; ++l) {
          const __m256 bv = _mm256_set1_ps(bj[l]);
          const float* al = pa.data() + l * kRows;
          for (int t = 0; t < kRows / 8; ++t) acc[t] = _mm256_fmadd_ps(_mm256_loadu_ps(al + 8 * t), bv, acc[t]);
        }
        for (int t = 0; t < kRows / 8; ++t) _mm256_store_ps(sum + 8 * t, acc[t]);
        for (int64_t r = 0; r < rows; ++r) {
          float v = g.alpha * sum[r];
          if (g.beta != 0.0f) v += g.beta * g.c[(i0 + r) + j * g.ldc];
          g.d[(i0 + r) + j * g.ldd] = v;
        }
      }
    }
  });
}

}  // namespace titan::cuda_kernels
#endif  // TITAN_CUDA_RUNTIME
