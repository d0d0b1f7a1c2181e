// The decode GEMV (ops/matmul/gemv.h) against the reference linear: rows 1..4 (and a few more, in
// blocks), odd N and K (vector tails in both), f32 and bf16 weights, with and without the
// residual input, on the AVX-512 (bf16 W on vdpbf16ps and widened) and the AVX2 bodies; the same
// bits with 1 and 2 threads; and the cpu linear variant takes this path for small inputs (same
// bits as calling it directly).
#include <gtest/gtest.h>

#include "ops/matmul/bf16_convert.h"
#include "ops/matmul/gemv.h"
#include "ops/matmul/matmul.h"
#include "op_test_util.h"

namespace titan {
namespace {

using optest::bitwise_equal;
using optest::close;

struct Shape3 {
  int64_t m, k, n;
};
const Shape3 kShapes[] = {{1, 1, 1}, {1, 7, 3}, {2, 17, 5}, {3, 33, 9}, {4, 100, 13},
                          {1, 257, 70}, {4, 1000, 37}, {5, 31, 6}, {9, 64, 11}, {2, 301, 1030},
                          {1, 200, 19}, {1, 1024, 21}};  // m = 1 bf16: whole 128-column steps and the masked rest

// Code paths: 0 the AVX2 body, 1 AVX-512 (bf16 W on vdpbf16ps where the CPU has AVX512_BF16),
// 2 AVX-512 with bf16 W widened to f32 (the form of AVX-512 CPUs without AVX512_BF16).
Tensor run(const Tensor& x, const Tensor& w, const Tensor* r, DType compute, int path) {
  Tensor y = Tensor::empty({x.dim(0), w.dim(0)}, DType::F32);
  linear_forward_gemv(x, w, r, y, compute, path != 0, path == 1);
  return y;
}

TEST(Gemv, MatchesReferenceLinear) {
  for (const Shape3& s : kShapes)
    for (bool bf : {false, true})
      for (bool residual : {false, true})
        for (int avx512 : {1, 2, 0}) {
          SCOPED_TRACE(::testing::Message() << "m=" << s.m << " k=" << s.k << " n=" << s.n << " bf16=" << bf
                                            << " residual=" << residual << " path=" << avx512);
          const Tensor x = test::randn({s.m, s.k}, 1), w = test::randn({s.n, s.k}, 2), r = test::randn({s.m, s.n}, 3);
          const DType c = bf ? DType::BF16 : DType::F32;
          Tensor want = Tensor::empty({s.m, s.n}, DType::F32);
          kernel<LinearKernel>("reference")
              .forward_residual(ExecContext::host(), x, w, residual ? &r : nullptr, want, c);
          // f32 accumulation over K products of unit normals: error ~ sqrt(K) * 2^-24 * |terms|.
          const Tensor got = run(x, w, residual ? &r : nullptr, c, avx512);
          EXPECT_TRUE(close(got, want, 1e-5 * std::sqrt(double(s.k)), 1e-5));
          if (bf) {  // bf16 weights and inputs given as bf16 tensors: the same products, the same bits
            EXPECT_TRUE(bitwise_equal(run(to_bf16(x), to_bf16(w), residual ? &r : nullptr, c, avx512), got));
          }
        }
}

TEST(Gemv, SameBitsForAnyThreadCount) {
  // Large enough to split over the decode team (gemv.cpp: kInlineBytes): each chunk's rows in three
  // or four lockstep parts and a few rows left over (gemv.avx2.cpp, gemv.avx512.cpp), cut
  // differently for each thread count.
  const int saved = num_threads();
  const Tensor w = test::randn({2000, 513}, 5);
  for (int64_t m : {1, 2, 3, 4})
    for (bool bf : {false, true})
      for (int path : {0, 1, 2}) {
        const Tensor x = test::randn({m, 513}, 4);
        const Tensor wk = bf ? to_bf16(w) : w;
        const DType c = bf ? DType::BF16 : DType::F32;
        set_num_threads(1);
        const Tensor one = run(x, wk, nullptr, c, path);
        for (int t : {2, 3}) {
          set_num_threads(t);
          EXPECT_TRUE(bitwise_equal(run(x, wk, nullptr, c, path), one))
              << "m=" << m << " bf16=" << bf << " path=" << path << " threads=" << t;
        }
      }
  set_num_threads(saved);
}

TEST(Gemv, CpuLinearTakesThePathForFewRows) {
  const Tensor x = test::randn({kGemvMaxRows, 77}, 6), w = test::randn({45, 77}, 7);
  for (bool bf : {false, true}) {
    const DType c = bf ? DType::BF16 : DType::F32;
    Tensor y = Tensor::empty({kGemvMaxRows, 45}, DType::F32);
    kernel<LinearKernel>("cpu").forward(ExecContext::host(), x, w, y, c);
    EXPECT_TRUE(bitwise_equal(y, run(x, w, nullptr, c, 1))) << "bf16=" << bf;
  }
}

TEST(Gemv, RejectsBf16InputsWithF32Compute) {
  const Tensor x = test::randn({1, 8}, 8), w = to_bf16(test::randn({4, 8}, 9));
  Tensor y = Tensor::empty({1, 4}, DType::F32);
  EXPECT_THROW(linear_forward_gemv(x, w, nullptr, y, DType::F32), Error);
}

}  // namespace
}  // namespace titan
