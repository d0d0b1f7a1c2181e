// The cuBLAS-shaped GEMM interface (ops/cuda/blas.h): its reference kernel follows column-major,
// transpose and leading-dimension rules (checked on hand-sized matrices), check_blas refuses what
// cuBLAS refuses, and to_blas maps the row-major GEMM onto it (the transposition trick).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/cuda_emu/cuda.h"
#include "core/dtype.h"
#include "core/error.h"
#include "ops/cuda/gemm_variant.h"
#include "ops/cuda/launch.h"

namespace {

namespace ck = titan::cuda_kernels;

TEST(BlasGemm, ColumnMajorWithTransposesAndLeadingDimensions) {
#ifdef TITAN_CUDA_RUNTIME
  GTEST_SKIP() << "host pointers: an emulator test";
#endif
  // op(A) = A^T with A stored k x m = 2 x 3 (lda 4, one padding row); B stored k x n = 2 x 2 (ldb 2).
  // A (column-major, ld 4): columns (1,2,*,*), (3,4,*,*), (5,6,*,*) -> A = [[1,3,5],[2,4,6]], A^T 3 x 2.
  std::vector<float> a = {1, 2, -99, -99, 3, 4, -99, -99, 5, 6, -99, -99};
  std::vector<float> b = {1, 10, 2, 20};  // B = [[1, 2], [10, 20]]
  std::vector<float> d(3 * 2 + 1, 7.0f);  // ldd 3, one extra element that must stay 7
  ck::BlasGemm g;
  g.transa = ck::BlasOp::T, g.transb = ck::BlasOp::N;
  g.m = 3, g.n = 2, g.k = 2;
  g.a = a.data(), g.lda = 4, g.b = b.data(), g.ldb = 2, g.d = d.data(), g.ldd = 3;
  g.alpha = 2.0f;
  ck::blas_gemm(g, nullptr, nullptr);
  // A^T B = [[1,2],[3,4],[5,6]] [[1,2],[10,20]] = [[21,42],[43,86],[65,130]]; times alpha 2.
  const std::vector<float> want = {42, 86, 130, 84, 172, 260};  // column-major
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(d[i], want[i]) << i;
  EXPECT_EQ(d[6], 7.0f);
  // beta accumulates from a separate C; a too-small leading dimension is refused as cuBLAS does.
  std::vector<float> c(6, 1.0f);
  g.c = c.data(), g.ldc = 3, g.beta = 0.5f;
  ck::blas_gemm(g, nullptr, nullptr);
  EXPECT_EQ(d[0], 42.5f);
  g.lda = 1;
  EXPECT_THROW(ck::blas_gemm(g, nullptr, nullptr), titan::Error);
  g.lda = 4, g.ldd = 2;
  EXPECT_NE(std::string(ck::check_blas(g)), "");
}

TEST(BlasGemm, Tf32RoundsF32Inputs) {
#ifdef TITAN_CUDA_RUNTIME
  GTEST_SKIP() << "host pointers: an emulator test";
#endif
  // 1 + 2^-12 is not a TF32 value (10 mantissa bits): it rounds to 1.
  std::vector<float> a = {1.0f + 1.0f / 4096}, b = {1.0f}, d = {0.0f};
  ck::BlasGemm g;
  g.m = g.n = g.k = 1, g.a = a.data(), g.lda = 1, g.b = b.data(), g.ldb = 1, g.d = d.data(), g.ldd = 1;
  ck::blas_gemm(g, nullptr, nullptr);
  EXPECT_EQ(d[0], a[0]);
  g.tf32 = true;
  ck::blas_gemm(g, nullptr, nullptr);
  EXPECT_EQ(d[0], 1.0f);
}

TEST(BlasGemm, RowMajorMapsToTheTransposedColumnMajorCall) {
  titan::GemmArgs g;
  g.trans_a = true, g.trans_b = false, g.m = 5, g.n = 3, g.k = 4;
  g.lda = 7, g.ldb = 9, g.ldc = 11, g.ldadd = 13, g.alpha = 0.5f, g.beta = 0.f;
  int a = 0, b = 0;
  float c = 0, add = 0;
  ck::BlasGemm r = titan::to_blas(g, &a, &b, &c, &add);
  EXPECT_EQ(r.m, 3);
  EXPECT_EQ(r.n, 5);
  EXPECT_EQ(r.k, 4);
  EXPECT_EQ(r.a, &b);
  EXPECT_EQ(r.lda, 9);
  EXPECT_EQ(r.transa, ck::BlasOp::N);
  EXPECT_EQ(r.b, &a);
  EXPECT_EQ(r.ldb, 7);
  EXPECT_EQ(r.transb, ck::BlasOp::T);
  EXPECT_EQ(r.d, &c);
  EXPECT_EQ(r.ldd, 11);
  EXPECT_EQ(r.c, &add);  // the residual as the epilogue's C with beta 1
  EXPECT_EQ(r.ldc, 13);
  EXPECT_EQ(r.beta, 1.0f);
  EXPECT_STREQ(ck::check_blas(r), "");  // row-major lds are valid column-major ones after the swap
  g.beta = 0.25f;
  r = titan::to_blas(g, &a, &b, &c, &add);
  EXPECT_EQ(r.c, &c);
  EXPECT_EQ(r.beta, 0.25f);
}

}  // namespace

#ifndef TITAN_CUDA_RUNTIME
// The emulator's host form of blas_gemm (blas.h) against the tiled kernel, bit for bit: f32, bf16
// and TF32 inputs, both transposes, padded leading dimensions, k off the tile size, beta with a C,
// and sizes either side of the host form's 64-row blocks.
TEST(BlasGemm, EmulatorHostFormEqualsTheTiledKernelBitForBit) {
  struct Case {
    int64_t m, n, k;
    bool ta, tb, bf16, tf32;
    float alpha, beta;
  };
  const Case cases[] = {{70, 9, 37, false, false, false, false, 1, 0},  {129, 17, 48, true, false, false, false, 0.5f, 1},
                        {65, 33, 19, false, true, true, false, 1, 0},   {3, 130, 100, true, true, false, true, 2, 0.25f},
                        {64, 1, 1, false, false, false, false, -1, 0}, {200, 40, 300, true, false, true, false, 1, 1}};
  uint32_t seed = 12345;
  auto rnd = [&] {
    seed = seed * 1664525u + 1013904223u;
    return float(int32_t(seed >> 8) % 2001 - 1000) / 257.0f;
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "m " << c.m << " n " << c.n << " k " << c.k << (c.ta ? " A^T" : "")
                                    << (c.tb ? " B^T" : "") << (c.bf16 ? " bf16" : "") << (c.tf32 ? " tf32" : ""));
    const int64_t a_rows = c.ta ? c.k : c.m, a_cols = c.ta ? c.m : c.k, b_rows = c.tb ? c.n : c.k,
                  b_cols = c.tb ? c.k : c.n;
    const int64_t lda = a_rows + 3, ldb = b_rows + 1, ldc = c.m + 2, ldd = c.m + 5;
    std::vector<float> af(size_t(lda * a_cols)), bf(size_t(ldb * b_cols)), cc(size_t(ldc * c.n));
    for (auto& v : af) v = rnd();
    for (auto& v : bf) v = rnd();
    for (auto& v : cc) v = rnd();
    std::vector<uint16_t> ab(af.size()), bb(bf.size());
    for (size_t i = 0; i < af.size(); ++i) ab[i] = uint16_t(titan::f32_to_bf16(af[i]));
    for (size_t i = 0; i < bf.size(); ++i) bb[i] = uint16_t(titan::f32_to_bf16(bf[i]));
    ck::BlasGemm g;
    g.transa = c.ta ? ck::BlasOp::T : ck::BlasOp::N, g.transb = c.tb ? ck::BlasOp::T : ck::BlasOp::N;
    g.m = c.m, g.n = c.n, g.k = c.k, g.alpha = c.alpha, g.beta = c.beta, g.bf16 = c.bf16, g.tf32 = c.tf32;
    g.a = c.bf16 ? static_cast<const void*>(ab.data()) : af.data(), g.lda = lda;
    g.b = c.bf16 ? static_cast<const void*>(bb.data()) : bf.data(), g.ldb = ldb;
    g.c = cc.data(), g.ldc = ldc, g.ldd = ldd;
    std::vector<float> kernel_d(size_t(ldd * c.n), 7.0f), host_d = kernel_d;
    g.d = kernel_d.data();
    ck::blas_gemm_reference(g, nullptr);
    g.d = host_d.data();
    ck::blas_gemm_host(g);
    size_t differ = 0;
    for (size_t i = 0; i < kernel_d.size(); ++i)
      differ += std::memcmp(&kernel_d[i], &host_d[i], sizeof(float)) != 0;
    EXPECT_EQ(differ, 0u);
  }
}
#endif
