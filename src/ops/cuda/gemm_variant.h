// The mapping of the project's row-major GEMM (ops/matmul/matmul.h) onto cuBLAS's column-major
// interface (ops/cuda/blas.h), used by the "cuda" gemm and linear variants (gemm_variant.cpp).
#pragma once
#include "ops/cuda/blas.h"
#include "ops/matmul/matmul.h"

namespace titan {

// g's operands at the given device pointers (a, b: g.a, g.b; c: g.c, in and out; add: g.add or
// null) as one column-major GEMM. With both g.add and g.beta != 0 the addend is left out (the
// caller adds it after: cuBLASLt's epilogue has one C input).
cuda_kernels::BlasGemm to_blas(const GemmArgs& g, const void* a, const void* b, float* c, const float* add);

}  // namespace titan
