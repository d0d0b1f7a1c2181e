// AVX-512 probe kernels of peak_flops.cpp (called only after its CPU check): 16 independent zmm
// accumulator chains (FMA latency 4-6 cycles x up to 2 pipes needs 8-12), inputs from the caller
// so nothing is a compile-time constant, and the chains summed into the result, so the compiler
// can neither fold nor drop the loop (and without -ffast-math it may not reassociate the FMAs).
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's _mm512_undefined_* (PR 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>

namespace titan::detail {

constexpr int kChainsAvx512 = 16;

// acc = acc * mul + add per chain and iteration: 16 chains x 16 lanes x 2 flops per iteration.
// With |mul| < 1 every chain converges to add / (1 - mul): no overflow, no subnormals.
__attribute__((noinline)) float peak_fma_avx512(int64_t iters, float mul, float add) {
  __m512 acc[kChainsAvx512];
  for (int i = 0; i < kChainsAvx512; ++i) acc[i] = _mm512_set1_ps(add * float(i));
  const __m512 x = _mm512_set1_ps(mul), y = _mm512_set1_ps(add);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChainsAvx512; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  __m512 s = acc[0];
  for (int i = 1; i < kChainsAvx512; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

// vdpbf16ps: acc += a[2l] b[2l] + a[2l+1] b[2l+1] per f32 lane l: 16 chains x 16 lanes x 4 flops
// per iteration. a_bits / b_bits are the bf16 bit patterns broadcast to every element (1.0 and
// 2^-24 from the caller: each chain grows by 2^-23 per iteration, far from overflow).
__attribute__((noinline)) float peak_dpbf16_avx512(int64_t iters, uint16_t a_bits, uint16_t b_bits) {
  __m512 acc[kChainsAvx512];
  for (int i = 0; i < kChainsAvx512; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(short(a_bits));
  const __m512bh b = (__m512bh)_mm512_set1_epi16(short(b_bits));
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChainsAvx512; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  __m512 s = acc[0];
  for (int i = 1; i < kChainsAvx512; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

}  // namespace titan::detail
