// The decode-time linear: y[m, N] = x[m, K] @ W[N, K]^T (+ r) for m <= kGemvMaxRows rows (one
// new token per sequence of a small batch). Such a product is bound by reading W, so this path
// streams W exactly once, as stored (f32, or bf16 widened to f32 in registers), with no packing,
// split over N in one parallel region (none for a small W). Each output element is one dot
// product summed in a fixed order on one thread, so results do not depend on the thread count.
//
// compute BF16 keeps linear's meaning (matmul.h): x is rounded to bf16 values (when given f32) and
// W is used as given when BF16; an f32 W with bf16 compute is rounded once per call first (the
// model holds its bf16 weights, so generation never takes that path).
//
// Code paths: AVX-512 (gemv.avx512.cpp) when the CPU has it (checked at run time), else AVX2+FMA
// (the build's baseline); bf16 W on a CPU with AVX512_BF16 runs vdpbf16ps on W as loaded (x as
// bf16: half the instructions per W byte of widening it to f32). On AVX-512 each thread reads its
// W rows as four sequential streams in lockstep (gemv.avx512.cpp), which reaches the machine's
// read bandwidth where one stream per thread does not; both bf16 forms then read at the memory's
// rate (bench/generate/gemv_probe.cpp: 16.2 GB/s on one thread, 30-32 on two).
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace titan {

constexpr int64_t kGemvMaxRows = 4;

// The linear forward on the GEMV path, for any number of rows (blocks of kGemvMaxRows; only
// small counts are fast). allow_avx512 = false forces the AVX2 path, allow_dpbf16 = false the
// widening AVX-512 form for bf16 W on an AVX512_BF16 CPU (tests).
void linear_forward_gemv(const Tensor& x, const Tensor& w, const Tensor* r, Tensor& y, DType compute,
                         bool allow_avx512 = true, bool allow_dpbf16 = true);

namespace detail {
// Rows [n0, n1) of y[m, N] (row stride ldy) = x[m, K] (f32, row stride k) . W[n, :] (+ add[m, N],
// row stride ldy), W [N, K] f32 or bf16 (w_bf16). m in 1..kGemvMaxRows.
using GemvBlockFn = void (*)(const float* x, int64_t m, int64_t k, const void* w, bool w_bf16, int64_t n0,
                             int64_t n1, float* y, int64_t ldy, const float* add);
void gemv_block_avx2(const float* x, int64_t m, int64_t k, const void* w, bool w_bf16, int64_t n0, int64_t n1,
                     float* y, int64_t ldy, const float* add);
void gemv_block_avx512(const float* x, int64_t m, int64_t k, const void* w, bool w_bf16, int64_t n0, int64_t n1,
                       float* y, int64_t ldy, const float* add);
// The same for bf16 W and x given as bf16 (row stride k), on vdpbf16ps (AVX512_BF16 CPUs only).
void gemv_block_avx512_bf16dp(const uint16_t* x, int64_t m, int64_t k, const uint16_t* w, int64_t n0, int64_t n1,
                              float* y, int64_t ldy, const float* add);
}  // namespace detail

}  // namespace titan
