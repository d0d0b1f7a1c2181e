// The plan both decode-GEMV bodies share (gemv.avx2.cpp, gemv.avx512.cpp; plain C++, no
// intrinsics, so each body instantiates it with its own instruction set): a thread's W rows
// [n0, n1) are cut into S contiguous parts read in lockstep, one row of each at a time against all
// M x rows, so that the core keeps S sequential streams in flight; the rows left over after the S
// equal parts run the same dot product one at a time. Each W row is thus summed by one form
// whichever part it falls in, and the bits do not depend on how the rows are split over threads.
#pragma once
#include <cstdint>
#include <type_traits>

namespace titan::detail {

// Rows [n0, n1) of y[M, N] (row stride ldy) = x W^T (+ add, row stride ldy). dot(S', wr, out)
// writes out[s * M + r] = x row r . W row wr[s] for s < S' (S' is S, or 1 for the rest), as a
// std::integral_constant.
template <int M, int S, class Dot>
inline void gemv_lockstep(const char* w, int64_t row_bytes, int64_t n0, int64_t n1, float* y, int64_t ldy,
                          const float* add, Dot&& dot) {
  const auto store = [&](int64_t n, const float* v) {
    for (int r = 0; r < M; ++r) y[r * ldy + n] = add ? v[r] + add[r * ldy + n] : v[r];
  };
  const int64_t len = (n1 - n0) / S;
  for (int64_t t = 0; t < len; ++t) {
    const void* wr[S];
    for (int s = 0; s < S; ++s) wr[s] = w + (n0 + s * len + t) * row_bytes;
    float out[S * M];
    dot(std::integral_constant<int, S>{}, wr, out);
    for (int s = 0; s < S; ++s) store(n0 + s * len + t, out + s * M);
  }
  for (int64_t n = n0 + S * len; n < n1; ++n) {
    const void* wr[1] = {w + n * row_bytes};
    float out[M];
    dot(std::integral_constant<int, 1>{}, wr, out);
    store(n, out);
  }
}

// f(std::integral_constant<int, m>) for the x row count m in 1..4 (4 for anything larger).
template <class F>
inline void gemv_by_rows(int64_t m, F&& f) {
  switch (m) {
    case 1:
      return f(std::integral_constant<int, 1>{});
    case 2:
      return f(std::integral_constant<int, 2>{});
    case 3:
      return f(std::integral_constant<int, 3>{});
    default:
      return f(std::integral_constant<int, 4>{});
  }
}

}  // namespace titan::detail
