// What the CPU this process runs on can execute, checked once. The *.avx512.cpp files are built
// for AVX-512 F, BW, VL and DQ with BF16 (CMakeLists.txt), so their code runs only where
// cpu_has_avx512() holds, and their bf16 dot-product paths (vdpbf16ps) only where
// cpu_has_avx512_bf16() does.
#pragma once

namespace titan {

bool cpu_has_avx2_fma();     // AVX2 and FMA (the *.avx2.cpp files' x86-64-v3 code runs)
bool cpu_has_avx512();       // AVX-512 F, BW, VL and DQ
bool cpu_has_avx512_bf16();  // those and AVX512_BF16

}  // namespace titan
