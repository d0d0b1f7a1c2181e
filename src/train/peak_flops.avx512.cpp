// AVX-512 probe kernels of peak_flops.cpp (called only after its CPU check). Each is a loop of
// independent zmm accumulator chains, inputs from the caller so nothing is a compile-time
// constant, and the chains summed into the result, so the compiler can neither fold nor drop the
// loop (and without -ffast-math it may not reassociate the multiply-adds).
//
// Several forms of each, because no one form reaches the issue rate on every CPU: the chains
// needed are latency x pipes (Zen 4 issues one 512-bit FMA or vdpbf16ps per cycle at latency 4-6,
// Zen 5 and Intel two), and some cores issue a multiply-add whose third operand is a broadcast
// from memory (the form oneDNN's brgemm kernels run: `vdpbf16ps zmm, zmm, m32bcst`) at a higher
// rate than the all-register form. peak_flops.cpp times every form and keeps the fastest.
//   register forms: 12, 16, 24 or 30 chains, both multiplicands in registers;
//   broadcast forms: 16 or 24 chains, one multiplicand a 32-bit broadcast from an L1-resident line.
// And the AMX tile probe (tdpbf16ps), compiled for AMX-TILE/AMX-BF16 by a target attribute, called
// only where CPUID, XCR0 and the kernel's permission (arch_prctl) allow tiles: there oneDNN runs
// every bf16 matmul on the tiles, far above the vdpbf16ps rate.
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's _mm512_undefined_* (PR 105593)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "train/peak_flops_kernels.h"

namespace titan::detail {
namespace {

// acc = acc * mul + add per chain and iteration: chains x 16 lanes x 2 flops per iteration.
// With |mul| < 1 every chain converges to add / (1 - mul): no overflow, no subnormals.
template <int C, bool Mem>
__attribute__((noinline)) float fma_chains(int64_t iters, float mul, float add) {
  __m512 acc[C];
  for (int i = 0; i < C; ++i) acc[i] = _mm512_set1_ps(add * float(i));
  const __m512 x = _mm512_set1_ps(mul), y = _mm512_set1_ps(add);
  alignas(64) float line[16];
  for (float& v : line) v = mul;
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < C; ++i) {
      if constexpr (Mem)  // acc = acc * line[i % 16] (broadcast) + y
        __asm__("vfmadd132ps %[m]%{1to16%}, %[y], %[acc]" : [acc] "+v"(acc[i]) : [y] "v"(y), [m] "m"(line[i % 16]));
      else
        acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    }
  __m512 s = acc[0];
  for (int i = 1; i < C; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

// vdpbf16ps: acc += a[2l] b[2l] + a[2l+1] b[2l+1] per f32 lane l: chains x 16 lanes x 4 flops per
// iteration. a_bits / b_bits are the bf16 bit patterns broadcast to every element (1.0 and 2^-24
// from the caller: each chain grows by 2^-23 per iteration, far from overflow).
template <int C, bool Mem>
__attribute__((noinline)) float dpbf16_chains(int64_t iters, uint16_t a_bits, uint16_t b_bits) {
  __m512 acc[C];
  for (int i = 0; i < C; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(short(a_bits));
  const __m512bh b = (__m512bh)_mm512_set1_epi16(short(b_bits));
  alignas(64) uint32_t line[16];  // bf16 pairs (b, b)
  for (uint32_t& v : line) v = uint32_t(b_bits) | uint32_t(b_bits) << 16;
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < C; ++i) {
      if constexpr (Mem)  // acc += a . broadcast(line[i % 16])
        __asm__("vdpbf16ps %[m]%{1to16%}, %[a], %[acc]" : [acc] "+v"(acc[i]) : [a] "v"(a), [m] "m"(line[i % 16]));
      else
        acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
    }
  __m512 s = acc[0];
  for (int i = 1; i < C; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

struct Form {
  int chains;
  bool mem;
  float (*fma)(int64_t, float, float);
  float (*dp)(int64_t, uint16_t, uint16_t);
};
constexpr Form kForms[] = {
    {12, false, fma_chains<12, false>, dpbf16_chains<12, false>},
    {16, false, fma_chains<16, false>, dpbf16_chains<16, false>},
    {24, false, fma_chains<24, false>, dpbf16_chains<24, false>},
    {30, false, fma_chains<30, false>, dpbf16_chains<30, false>},
    {16, true, fma_chains<16, true>, dpbf16_chains<16, true>},
    {24, true, fma_chains<24, true>, dpbf16_chains<24, true>},
};

// AMX: 6 accumulator tiles C0..C5 of 16 x 16 f32, each C_t += A B with A (tmm6) 16 rows x 32
// bf16 and B (tmm7) 16 row pairs x 16 columns x 2 bf16: 16 * 16 * 32 products, 2 flops each, per
// tdpbf16ps. Six independent chains: a tdpbf16ps issues every 16 cycles per core with a latency of
// about 52, so each chain's next multiply waits for nothing. a_bits / b_bits as in dpbf16_chains
// (1.0 and 2^-24): every element of every C grows by exactly 32 * 2^-24 = 2^-19 per iteration (far
// from overflow), so the sum returned is 6 * 256 * iters * 2^-19 while that stays exact (the
// test checks it, proving the tiles did the work counted).
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile,amx-bf16"), noinline)) float tdpbf16_tiles(int64_t iters, uint16_t a_bits,
                                                                           uint16_t b_bits) {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.colsb[t] = 64, cfg.rows[t] = 16;
  _tile_loadconfig(&cfg);
  alignas(64) uint16_t a[16 * 32], b[16 * 32];
  alignas(64) float c[16 * 16] = {};
  for (int i = 0; i < 16 * 32; ++i) a[i] = a_bits, b[i] = b_bits;
  _tile_loadd(0, c, 64);
  _tile_loadd(1, c, 64);
  _tile_loadd(2, c, 64);
  _tile_loadd(3, c, 64);
  _tile_loadd(4, c, 64);
  _tile_loadd(5, c, 64);
  _tile_loadd(6, a, 64);
  _tile_loadd(7, b, 64);
  for (int64_t it = 0; it < iters; ++it) {
    _tile_dpbf16ps(0, 6, 7);
    _tile_dpbf16ps(1, 6, 7);
    _tile_dpbf16ps(2, 6, 7);
    _tile_dpbf16ps(3, 6, 7);
    _tile_dpbf16ps(4, 6, 7);
    _tile_dpbf16ps(5, 6, 7);
  }
  float sum = 0;
  auto add = [&] {
    for (float v : c) sum += v;
  };
  _tile_stored(0, c, 64);
  add();
  _tile_stored(1, c, 64);
  add();
  _tile_stored(2, c, 64);
  add();
  _tile_stored(3, c, 64);
  add();
  _tile_stored(4, c, 64);
  add();
  _tile_stored(5, c, 64);
  add();
  _tile_release();
  return sum;
}

}  // namespace

int peak_amx_tiles() { return 6; }
float peak_tdpbf16_amx(int64_t iters, uint16_t a_bits, uint16_t b_bits) { return tdpbf16_tiles(iters, a_bits, b_bits); }

int peak_forms_avx512() { return int(sizeof kForms / sizeof kForms[0]); }
int peak_form_chains_avx512(int form) { return kForms[form].chains; }
bool peak_form_broadcast_avx512(int form) { return kForms[form].mem; }
float peak_fma_avx512(int form, int64_t iters, float mul, float add) { return kForms[form].fma(iters, mul, add); }
float peak_dpbf16_avx512(int form, int64_t iters, uint16_t a_bits, uint16_t b_bits) {
  return kForms[form].dp(iters, a_bits, b_bits);
}

}  // namespace titan::detail
