// The probe kernels of peak_flops.cpp, each in the file compiled for its instruction set
// (peak_flops.avx512.cpp: AVX-512 F/BF16 forms and the AMX tile kernel; peak_flops.avx2.cpp).
// Call one only after peak_flops.cpp's CPU check for it.
#pragma once
#include <cstdint>

namespace titan::detail {

// AVX-512: forms of independent zmm chains (register or broadcast operand).
int peak_forms_avx512();
int peak_form_chains_avx512(int form);
bool peak_form_broadcast_avx512(int form);
float peak_fma_avx512(int form, int64_t iters, float mul, float add);
float peak_dpbf16_avx512(int form, int64_t iters, uint16_t a_bits, uint16_t b_bits);
// AMX-BF16: tdpbf16ps on peak_amx_tiles() accumulator tiles; returns the sum of their elements
// (exactly tiles * 256 * iters * 32 * a * b while that fits f32's 24 bits).
int peak_amx_tiles();
float peak_tdpbf16_amx(int64_t iters, uint16_t a_bits, uint16_t b_bits);
// AVX2 + FMA.
int peak_chains_avx2();
float peak_fma_avx2(int64_t iters, float mul, float add);

}  // namespace titan::detail
