// AVX2 + FMA probe kernel of peak_flops.cpp (called only after its CPU check; this file alone is
// compiled for x86-64-v3, CMakeLists.txt): 12 independent ymm accumulator chains, two registers
// left for the inputs, which come from the caller so nothing is a compile-time constant, and the
// chains summed into the result, so the compiler can neither fold nor drop the loop.
#include <immintrin.h>

#include <cstdint>

#include "train/peak_flops_kernels.h"

namespace titan::detail {
namespace {
constexpr int kChainsAvx2 = 12;
}  // namespace

int peak_chains_avx2() { return kChainsAvx2; }

__attribute__((noinline)) float peak_fma_avx2(int64_t iters, float mul, float add) {
  __m256 acc[kChainsAvx2];
  for (int i = 0; i < kChainsAvx2; ++i) acc[i] = _mm256_set1_ps(add * float(i));
  const __m256 x = _mm256_set1_ps(mul), y = _mm256_set1_ps(add);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < kChainsAvx2; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  __m256 s = acc[0];
  for (int i = 1; i < kChainsAvx2; ++i) s = _mm256_add_ps(s, acc[i]);
  float lanes[8];
  _mm256_storeu_ps(lanes, s);
  float r = 0;
  for (float v : lanes) r += v;
  return r;
}

}  // namespace titan::detail
