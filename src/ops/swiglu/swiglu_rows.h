// Row kernels of the cpu SwiGLU (see cpu.cpp for the math): AVX2 ones in cpu.cpp, AVX-512 ones in
// swiglu_rows.avx512.cpp; rows() picks the AVX-512 pair at run time when the CPU has AVX-512F. Both
// run the same per-lane arithmetic, so they give the same bits.
#pragma once
#include <cstdint>

namespace titan::swiglu_detail {

struct RowFns {
  // y[j] = silu(g[j]) * u[j], j < I
  void (*forward)(const float* g, const float* u, float* y, int64_t I);
  // dg[j], du[j] from g, u, dy (dg/du may alias g/u)
  void (*backward)(const float* g, const float* u, const float* dy, float* dg, float* du, int64_t I);
};

const RowFns& rows();
const RowFns& rows_avx2();
const RowFns* rows_avx512();  // never null in this build; call only when the CPU has AVX-512F

}  // namespace titan::swiglu_detail
