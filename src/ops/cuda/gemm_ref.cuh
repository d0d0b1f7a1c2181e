// The reference GEMM kernel in cuBLAS's column-major terms (ops/cuda/blas.h): 16 x 16 tiles of D
// per block, op(A) and op(B) staged through shared memory tile by tile along k, f32 accumulation.
// It is what blas_gemm runs under the emulator, so the column-major, transpose and leading-
// dimension rules it follows are the ones a row-major caller's mapping is tested against.
// Included by exactly one translation unit per build.
#pragma once
#include "ops/cuda/blas.h"
#include "ops/cuda/common.cuh"

namespace titan::cuda_kernels {

constexpr int kGemmTile = 16;

__device__ __forceinline__ float bf16_bits_to_f32(uint16_t b) { return __uint_as_float(unsigned(b) << 16); }

// Round to TF32 (10 mantissa bits, nearest even), as the tensor cores read f32 inputs in TF32 mode.
__device__ __forceinline__ float to_tf32(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f;  // inf, NaN
  u += 0xfffu + ((u >> 13) & 1u);
  return __uint_as_float(u & ~0x1fffu);
}

// Element (i, j) of op(X) where X is stored column-major with leading dimension ld.
__device__ __forceinline__ float load_op(const void* x, bool bf16, BlasOp op, int64_t i, int64_t j, int64_t ld,
                                         bool tf32) {
  const int64_t at = op == BlasOp::N ? i + j * ld : j + i * ld;
  if (bf16) return bf16_bits_to_f32(static_cast<const uint16_t*>(x)[at]);
  const float v = static_cast<const float*>(x)[at];
  return tf32 ? to_tf32(v) : v;
}

__global__ void gemm_ref_kernel(BlasGemm g) {
  TITAN_SHARED(float, as, kGemmTile * kGemmTile);  // as[r + l * 16]: op(A) rows r, k-slice l
  TITAN_SHARED(float, bs, kGemmTile * kGemmTile);  // bs[l + c * 16]: op(B) k-slice l, columns c
  const int tr = int(threadIdx.x), tc = int(threadIdx.y);
  const int64_t i = int64_t(blockIdx.x) * kGemmTile + tr, j = int64_t(blockIdx.y) * kGemmTile + tc;
  float acc = 0;
  for (int64_t l0 = 0; l0 < g.k; l0 += kGemmTile) {
    // Thread (tr, tc) loads op(A)(i, l0 + tc) and op(B)(l0 + tr, j); zeros outside.
    as[tr + tc * kGemmTile] =
        i < g.m && l0 + tc < g.k ? load_op(g.a, g.bf16, g.transa, i, l0 + tc, g.lda, g.tf32) : 0.0f;
    bs[tr + tc * kGemmTile] =
        l0 + tr < g.k && j < g.n ? load_op(g.b, g.bf16, g.transb, l0 + tr, j, g.ldb, g.tf32) : 0.0f;
    __syncthreads();
    for (int l = 0; l < kGemmTile; ++l) acc += as[tr + l * kGemmTile] * bs[l + tc * kGemmTile];
    __syncthreads();
  }
  if (i < g.m && j < g.n) {
    float v = g.alpha * acc;
    if (g.beta != 0.0f) v += g.beta * g.c[i + j * g.ldc];
    g.d[i + j * g.ldd] = v;
  }
}

// d[i * ldd + j] += r[i * ldr + j] (row-major rows x cols): a second addend after the GEMM.
__global__ void add_rows_kernel(float* d, int64_t ldd, const float* r, int64_t ldr, int64_t rows, int64_t cols) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= rows * cols) return;
  d[(e / cols) * ldd + e % cols] += r[(e / cols) * ldr + e % cols];
}

void add_rows(float* d, int64_t ldd, const float* r, int64_t ldr, int64_t rows, int64_t cols, void* stream) {
  if (rows * cols == 0) return;
  TITAN_LAUNCH(add_rows_kernel, dim3(unsigned((rows * cols + 255) / 256)), dim3(256), 0,
               static_cast<gpu::Stream>(stream), d, ldd, r, ldr, rows, cols);
}

const char* check_blas(const BlasGemm& g) {
  if (g.m < 0 || g.n < 0 || g.k < 0) return "negative m, n or k";
  const int64_t a_rows = g.transa == BlasOp::N ? g.m : g.k, b_rows = g.transb == BlasOp::N ? g.k : g.n;
  if (g.lda < (a_rows > 1 ? a_rows : 1)) return "lda is less than the rows of A as stored";
  if (g.ldb < (b_rows > 1 ? b_rows : 1)) return "ldb is less than the rows of B as stored";
  if (g.ldd < (g.m > 1 ? g.m : 1)) return "ldd is less than m";
  if (g.beta != 0.0f && (g.c == nullptr || g.ldc < (g.m > 1 ? g.m : 1))) return "beta != 0 without a C of ldc >= m";
  if (g.bf16 && g.tf32) return "tf32 applies to f32 inputs only";
  return "";
}

void blas_gemm_reference(const BlasGemm& g, void* stream) {
  if (g.m == 0 || g.n == 0) return;
  const dim3 grid(unsigned((g.m + kGemmTile - 1) / kGemmTile), unsigned((g.n + kGemmTile - 1) / kGemmTile));
  TITAN_LAUNCH(gemm_ref_kernel, grid, dim3(kGemmTile, kGemmTile), 0, static_cast<gpu::Stream>(stream), g);
}

}  // namespace titan::cuda_kernels
