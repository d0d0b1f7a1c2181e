// Internal to core/rng.cpp and core/rng.avx2.cpp: the Box-Muller normal of one Philox block, as
// plain IEEE arithmetic (+, -, *, /, sqrt and fused multiply-adds, each rounded once) instead of
// libm's log and cos, so that the scalar form (rng.cpp) and the 4-lane AVX2 form (rng.avx2.cpp)
// give the same bits, on every CPU and with any libm. Both evaluate exactly this:
//
//   u1 = (double((w0 << 21) ^ w1) + 0.5) / 2^53,  u2 = (w2 + 0.5) / 2^32   (w3 unused)
//   log(u1) = e ln2 + log(m), u1 = 2^e m, m in (sqrt(2)/2, sqrt(2)]: log(m) = 2 atanh(s),
//     s = (m - 1) / (m + 1), |s| <= 0.1716, by its series to s^23 (2s + 2s w Q(w), w = s^2)
//   cos(2 pi u2): q = round(4 u2) = (w2 + 2^29) >> 30, t = u2 - q / 4 in [-1/8, 1/8] (exact),
//     cos(2 pi t) and sin(2 pi t) by their Taylor series to t^16 and t^17, and by q mod 4:
//     cos, -sin, -cos, sin
//   z = sqrt(-2 log(u1)) cos(2 pi u2)
//
// Each truncated series is below 1e-18 of its value; the result is within a few ulps of the
// correctly rounded one (libm's log and cos were within one), so an f32 weight drawn from it
// rounds as it did with libm except, rarely, in its last bit.
#pragma once
#include <cstdint>

namespace titan::rng_detail {

// 1 / (2k + 1), k = 1..11: Q(w) = sum_k w^(k-1) / (2k + 1).
constexpr double kAtanh[11] = {0.3333333333333333,  0.2,
                               0.14285714285714285, 0.1111111111111111,
                               0.09090909090909091, 0.07692307692307693,
                               0.06666666666666667, 0.058823529411764705,
                               0.05263157894736842, 0.047619047619047616,
                               0.043478260869565216};
// (-1)^k (2 pi)^(2k) / (2k)!, k = 0..8, and (-1)^k (2 pi)^(2k+1) / (2k+1)!, each the double
// nearest the exact value.
constexpr double kCos[9] = {0x1p+0,
                            -0x1.3bd3cc9be45dep+4,
                            0x1.03c1f081b5ac4p+6,
                            -0x1.55d3c7e3cbffap+6,
                            0x1.e1f506891babbp+5,
                            -0x1.a6d1f2a204a8cp+4,
                            0x1.f9d38a3763cc3p+2,
                            -0x1.b6e24f44b128fp+0,
                            0x1.20c62c2f2d7f5p-2};
constexpr double kSin[9] = {0x1.921fb54442d18p+2,  -0x1.4abbce625be53p+5, 0x1.466bc6775aae2p+6,
                            -0x1.32d2cce62bd86p+6, 0x1.50783487ee782p+5,  -0x1.e3074fde8871fp+3,
                            0x1.e8f434d018d63p+1,  -0x1.6fadb9f155744p-1, 0x1.aaec32af93359p-4};
// ln 2 = kLn2Hi + kLn2Lo, kLn2Hi with 32 significant bits (e * kLn2Hi is exact for |e| < 2^21).
constexpr double kLn2Hi = 0x1.62e42fee00000p-1, kLn2Lo = 0x1.a39ef35793c76p-33;
constexpr double kSqrt2 = 0x1.6a09e667f3bcdp+0;
constexpr double kTwoM53 = 0x1p-53, kTwoM32 = 0x1p-32;

}  // namespace titan::rng_detail
