// gemm: the cpu variant against the reference on random shapes (odd sizes, all transposes,
// padded leading dimensions, alpha/beta), in f32 and bf16 inputs; and the reference itself
// against an independent definition.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "ops/matmul/matmul.h"

using namespace titan;

namespace {

struct Problem {
  bool ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  DType dt;
  std::vector<float> a, b, c0;       // f32 values (for bf16, already rounded to bf16 values)
  std::vector<uint16_t> a16, b16;    // bf16 bits of a and b
};

Problem make(bool ta, bool tb, int64_t m, int64_t n, int64_t k, int64_t pad, float alpha, float beta, DType dt,
             uint32_t seed) {
  Problem p{ta, tb, m, n, k, 0, 0, 0, alpha, beta, dt, {}, {}, {}, {}, {}};
  p.lda = (ta ? m : k) + pad;
  p.ldb = (tb ? k : n) + pad;
  p.ldc = n + pad;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto fill = [&](std::vector<float>& v, std::vector<uint16_t>& v16, int64_t rows, int64_t ld) {
    v.assign(size_t(rows * ld), 0.f);
    v16.assign(v.size(), 0);
    for (size_t i = 0; i < v.size(); ++i) {
      v[i] = u(rng);
      v16[i] = f32_to_bf16(v[i]);
      if (dt == DType::BF16) v[i] = bf16_to_f32(v16[i]);
    }
  };
  fill(p.a, p.a16, ta ? k : m, p.lda);
  fill(p.b, p.b16, tb ? n : k, p.ldb);
  p.c0.resize(size_t(m * p.ldc));
  for (float& x : p.c0) x = u(rng);
  return p;
}

// C after the kernel's gemm on p (C starting as p.c0), with the addend R (rows ldadd apart) when given.
std::vector<float> run(const GemmKernel& kern, const Problem& p, const float* add = nullptr, int64_t ldadd = 0) {
  std::vector<float> c = p.c0;
  GemmArgs g;
  g.trans_a = p.ta, g.trans_b = p.tb, g.m = p.m, g.n = p.n, g.k = p.k, g.alpha = p.alpha, g.beta = p.beta;
  g.a = p.dt == DType::BF16 ? (const void*)p.a16.data() : p.a.data();
  g.b = p.dt == DType::BF16 ? (const void*)p.b16.data() : p.b.data();
  g.lda = p.lda, g.ldb = p.ldb, g.ldc = p.ldc, g.c = c.data(), g.in_dtype = p.dt;
  g.add = add, g.ldadd = ldadd;
  gemm(ExecContext::host(), kern, g);
  return c;
}

double opa(const Problem& p, int64_t i, int64_t q) { return p.a[size_t(p.ta ? q * p.lda + i : i * p.lda + q)]; }
double opb(const Problem& p, int64_t q, int64_t j) { return p.b[size_t(p.tb ? j * p.ldb + q : q * p.ldb + j)]; }

// Checks c against the exact alpha op(A) op(B) + beta C0 + R (R rows ldr apart; none when r is
// null): |c - exact| <= tol * (|alpha| sum|a||b| + |beta c0| + |r|), padding columns untouched.
void expect_exact(const Problem& p, const std::vector<float>& c, const float* r, int64_t ldr, double tol,
                  const std::string& what) {
  int bad = 0;
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.ldc; ++j) {
      const size_t at = size_t(i * p.ldc + j);
      if (j >= p.n) {
        if (c[at] != p.c0[at] && bad++ < 5) ADD_FAILURE() << what << ": padding of C written at " << i << ", " << j;
        continue;
      }
      double sum = 0, mag = 0;
      for (int64_t q = 0; q < p.k; ++q) {
        sum += opa(p, i, q) * opb(p, q, j);
        mag += std::fabs(opa(p, i, q) * opb(p, q, j));
      }
      const double c0 = p.beta == 0.f ? 0.0 : double(p.c0[at]), rv = r ? r[size_t(i * ldr + j)] : 0.0;
      const double exact = double(p.alpha) * sum + double(p.beta) * c0 + rv;
      const double bound = tol * (std::fabs(p.alpha) * mag + std::fabs(p.beta * c0) + std::fabs(rv));
      if (!(std::fabs(c[at] - exact) <= bound) && bad++ < 5)
        ADD_FAILURE() << what << " m=" << p.m << " n=" << p.n << " k=" << p.k << " ta=" << p.ta << " tb=" << p.tb
                      << " at (" << i << ", " << j << "): " << c[at] << " vs " << exact << " bound " << bound;
    }
  EXPECT_EQ(bad, 0) << what;
}

// The same without an addend: |c - exact| <= tol * (|alpha| sum|a||b| + |beta c0|).
void expect_close(const Problem& p, const std::vector<float>& c, double tol, const std::string& what) {
  expect_exact(p, c, nullptr, 0, tol, what);
}

// The cpu variant's widened bf16 form (cpu.cpp) with 4 KiB panels, as a kernel for run().
const GemmKernel kWidened{"cpu bf16 widened",
                          [](const ExecContext&, const GemmArgs& g) { detail::gemm_cpu_bf16_widened(g, 4096); }};

const GemmKernel& ref_k() { return kernel<GemmKernel>("reference"); }
const GemmKernel& cpu_k() { return kernel<GemmKernel>("cpu"); }

}  // namespace

TEST(Gemm, ReferenceMatchesDefinition) {
  // Double accumulation: only the final rounding to f32 separates it from the exact value.
  for (DType dt : {DType::F32, DType::BF16})
    for (int t = 0; t < 4; ++t) {
      Problem p = make(t & 1, t & 2, 17, 33, 65, 3, 0.75f, -0.5f, dt, 10u + unsigned(t));
      expect_close(p, run(ref_k(), p), 1e-7, "reference");
    }
}

TEST(Gemm, CpuMatchesReferenceOddShapesTransposesStrides) {
  const int64_t sizes[][3] = {{1, 1, 1},   {1, 17, 3},   {3, 1, 33},  {17, 33, 3},  {33, 17, 257},
                              {257, 3, 17}, {64, 48, 96}, {5, 257, 1}, {130, 67, 129}};
  const float ab[][2] = {{1.f, 0.f}, {1.f, 1.f}, {-0.5f, 2.f}, {2.f, -0.25f}};
  uint32_t seed = 1;
  for (DType dt : {DType::F32, DType::BF16})
    for (auto& s : sizes)
      for (int t = 0; t < 4; ++t)
        for (int64_t pad : {0, 5}) {
          auto [alpha, beta] = ab[seed % 4];
          Problem p = make(t & 1, t & 2, s[0], s[1], s[2], pad, alpha, beta, dt, seed++);
          std::vector<float> cr = run(ref_k(), p), cc = run(cpu_k(), p);
          // Both see identical (bf16-exact) inputs, so only f32 vs double accumulation differs:
          // the f32 error bound is ~k * 2^-24 relative to sum |a||b|; 1e-5 covers k <= 257 amply.
          expect_close(p, cc, 1e-5, dt == DType::F32 ? "cpu f32" : "cpu bf16");
          expect_close(p, cr, 1e-7, "reference");
          if (HasFailure()) return;
        }
}

TEST(Gemm, CpuLongReductionIntoASmallOutput) {
  // k >= 16384 and >= 8 max(m, n): in bf16 the cpu variant runs the transpose C^T = op(B)^T op(A)^T
  // and transposes the result into C with beta and the addend (cpu.cpp); f32 runs as stored. Every transpose, padded
  // leading dimensions, alpha/beta, and an addend, against the exact product. f32 accumulation
  // over k = 20000 terms: error ~ sqrt(k) 2^-24 of sum |a||b|, 1e-4 leaves a wide margin.
  const int64_t sizes[][3] = {{3, 7, 20000}, {33, 17, 20000}, {40, 70, 16384}};
  const float ab[][2] = {{1.f, 0.f}, {1.f, 1.f}, {-0.5f, 2.f}, {2.f, -0.25f}};
  uint32_t seed = 100;
  for (DType dt : {DType::F32, DType::BF16})
    for (auto& s : sizes)
      for (int t = 0; t < 4; ++t) {
        const int64_t pad = t % 2 ? 3 : 0;
        auto [alpha, beta] = ab[seed % 4];
        Problem p = make(t & 1, t & 2, s[0], s[1], s[2], pad, alpha, beta, dt, seed++);
        const std::vector<float> c = run(cpu_k(), p);
        expect_close(p, c, 1e-4, dt == DType::F32 ? "cpu f32, long k" : "cpu bf16, long k");
        // The same product with an addend R [m, n] (rows 5 apart from n), against the exact C + R.
        std::vector<float> r(size_t(p.m * (p.n + 5)));
        for (size_t i = 0; i < r.size(); ++i) r[i] = float(i % 13) * 0.5f - 3.f;
        const std::vector<float> cr = run(cpu_k(), p, r.data(), p.n + 5);
        expect_exact(p, cr, r.data(), p.n + 5, 1e-4, "addend, t=" + std::to_string(t));
        if (HasFailure()) return;
      }
}

TEST(Gemm, Bf16WidenedInPanelsMatchesTheExactProduct) {
  // The cpu variant's bf16 form where oneDNN has no bf16 matmul (AVX2-only CPUs): f32 matmuls on
  // operands widened in panels along the largest of m, n, k. 4 KiB panels (64 rows or columns of
  // the panel's dimension, the least) give several panels, the last one short, for each: m (A and
  // C by rows), n (B and C by columns), k (C accumulating: beta on the first, the addend with the
  // last). Every transpose, padded leading dimensions, alpha/beta, with and without an addend.
  const int64_t sizes[][3] = {{200, 30, 40}, {30, 300, 50}, {20, 30, 400}, {64, 64, 64}};
  const float ab[][2] = {{1.f, 0.f}, {1.f, 1.f}, {-0.5f, 2.f}, {2.f, -0.25f}};
  uint32_t seed = 300;
  for (auto& s : sizes)
    for (int t = 0; t < 4; ++t)
      for (bool with_add : {false, true}) {
        auto [alpha, beta] = ab[seed % 4];
        const Problem p = make(t & 1, t & 2, s[0], s[1], s[2], t % 2 ? 3 : 0, alpha, beta, DType::BF16, seed++);
        std::vector<float> r(size_t(p.m * (p.n + 5)));
        for (size_t i = 0; i < r.size(); ++i) r[i] = float(i % 13) * 0.5f - 3.f;
        // f32 sums of bf16-exact products (k <= 400, a few panels): 1e-5 of the magnitudes.
        expect_exact(p, run(kWidened, p, with_add ? r.data() : nullptr, p.n + 5), with_add ? r.data() : nullptr,
                     p.n + 5, 1e-5, "widened, t=" + std::to_string(t) + " add=" + std::to_string(with_add));
        if (HasFailure()) return;
      }
}

TEST(Gemm, BetaZeroIgnoresNanInC) {
  for (const GemmKernel* k : {&ref_k(), &cpu_k()}) {
    Problem p = make(false, true, 4, 5, 6, 0, 1.f, 0.f, DType::F32, 7);
    for (float& x : p.c0) x = NAN;
    std::vector<float> c = run(*k, p);
    for (float x : c) EXPECT_FALSE(std::isnan(x)) << k->variant;
  }
}

TEST(Gemm, EmptyProductScalesC) {
  for (const GemmKernel* k : {&ref_k(), &cpu_k()}) {
    Problem p = make(false, false, 3, 4, 0, 0, 1.f, 0.5f, DType::F32, 8);
    std::vector<float> c = run(*k, p);
    for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i], 0.5f * p.c0[i]);
    p.beta = 0.f;
    c = run(*k, p);
    for (float x : c) EXPECT_EQ(x, 0.f);
    Problem e = make(false, false, 0, 4, 3, 0, 1.f, 0.f, DType::F32, 9);  // m == 0: nothing to do
    EXPECT_TRUE(run(*k, e).empty());
  }
}

TEST(Gemm, CachedPrimitiveSeesNewData) {
  // Same shape twice with different buffers: the cache keys on shape only, never on pointers.
  Problem p1 = make(true, false, 33, 17, 9, 0, 1.f, 0.f, DType::BF16, 11);
  Problem p2 = make(true, false, 33, 17, 9, 0, 1.f, 0.f, DType::BF16, 12);
  expect_close(p1, run(cpu_k(), p1), 1e-5, "first");
  expect_close(p2, run(cpu_k(), p2), 1e-5, "second");
}

TEST(Gemm, ConcurrentCallsFromSeveralThreads) {
  std::vector<Problem> ps;
  for (int i = 0; i < 4; ++i) ps.push_back(make(i & 1, i & 2, 40 + i, 31, 50, 0, 1.f, 1.f, i < 2 ? DType::F32 : DType::BF16, 20u + unsigned(i)));
  std::vector<std::vector<float>> out(ps.size());
  std::vector<std::thread> th;
  for (size_t i = 0; i < ps.size(); ++i)
    th.emplace_back([&, i] {
      for (int rep = 0; rep < 5; ++rep) out[i] = run(cpu_k(), ps[i]);
    });
  for (auto& t : th) t.join();
  for (size_t i = 0; i < ps.size(); ++i) expect_close(ps[i], out[i], 1e-5, "threaded");
}

TEST(Gemm, BadArgumentsAreErrors) {
  float a[4] = {}, b[4] = {}, c[4] = {};
  GemmArgs g;
  g.m = g.n = g.k = 2, g.a = a, g.b = b, g.c = c;
  g.lda = 1;  // narrower than k
  EXPECT_THROW(gemm(ExecContext::host(), cpu_k(), g), Error);
  g.lda = 0, g.in_dtype = DType::I32;
  EXPECT_THROW(gemm(ExecContext::host(), ref_k(), g), Error);
  g.in_dtype = DType::F32, g.k = -1;
  EXPECT_THROW(gemm(ExecContext::host(), cpu_k(), g), Error);
}

// The addend R (a residual input): C = alpha op(A) op(B) + beta C + R, R rows at ldadd, for both
// variants, with and without the sum (beta), and in the empty-product case.
TEST(Gemm, AddendJoinsInTheEpilogue) {
  for (DType dt : {DType::F32, DType::BF16})
    for (float beta : {0.f, 0.5f})
      for (int64_t k : {int64_t(0), int64_t(1), int64_t(37)}) {
        const Problem p = make(false, true, 13, 9, k, 2, 0.75f, beta, dt, uint32_t(k + 3));
        std::vector<float> r(size_t(13 * 11));
        for (size_t i = 0; i < r.size(); ++i) r[i] = float(i % 17) * 0.25f - 2.f;
        std::vector<float> want = run(kernel<GemmKernel>("reference"), p);  // without R
        for (int64_t i = 0; i < 13; ++i)
          for (int64_t j = 0; j < 9; ++j) want[size_t(i * p.ldc + j)] += r[size_t(i * 11 + j)];
        for (const char* v : {"reference", "cpu"}) {
          const std::vector<float> c = run(kernel<GemmKernel>(v), p, r.data(), 11);
          for (int64_t i = 0; i < 13; ++i)
            for (int64_t j = 0; j < 9; ++j)
              ASSERT_NEAR(c[size_t(i * p.ldc + j)], want[size_t(i * p.ldc + j)], 1e-5)
                  << v << " k=" << k << " beta=" << beta << " (" << i << ", " << j << ")";
        }
      }
}
