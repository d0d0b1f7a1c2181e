// Bulk f32 -> bf16 rounding for the bf16 matmul path (inputs of every bf16 GEMM pass through it).
// Round to nearest even, NaN kept quiet, subnormals kept: bit-identical to titan::f32_to_bf16 on
// every input, whichever code path runs.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace titan {

// dst[i] = bf16(src[i]) for i < n, split over the thread pool in fixed chunks. allow_avx512 =
// false forces the portable scalar loop (for tests and the benchmark).
void f32_to_bf16_array(const float* src, uint16_t* dst, size_t n, bool allow_avx512 = true);

// The same on the calling thread only: for kernels that write a bf16 copy of a row they just
// computed (rmsnorm, swiglu with a BF16 output) from inside their own parallel loop.
void f32_to_bf16_row(const float* src, uint16_t* dst, size_t n);

// A BF16 tensor of t's shape: t itself when it already is BF16, else a new rounded copy of an
// F32 tensor (other dtypes are an error).
Tensor to_bf16(const Tensor& t);

}  // namespace titan
