// attention_cached (decode attention over a KV cache with left padding) against the causal
// attention op run on each row without its padding: one new token at every position, and a
// chunk of several new tokens, on GQA shapes; padding columns hold huge values that would show
// if they were attended to; with an f32 and a bf16 cache. Plus its argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/attention/attention.h"
#include "ops/attention/cached.h"

using namespace titan;

namespace {

Tensor randn(const Shape& s, uint64_t stream) {
  Tensor t = Tensor::empty(s, DType::F32);
  fill_normal(t, 0.0, 1.0, Philox{77, stream});
  return t;
}

struct Case {
  int64_t B, S, Hq, Hkv, D;
  std::vector<int64_t> first;
};

// out of the causal op for row b's columns [first, S): [S - first, Hq, D].
Tensor row_reference(const Tensor& q, const Tensor& k, const Tensor& v, int64_t b, int64_t first, float scale) {
  const int64_t S = q.dim(1), n = S - first;
  auto part = [&](const Tensor& t) {
    Tensor r = Tensor::empty({1, n, t.dim(2), t.dim(3)}, DType::F32);
    const int64_t row = t.dim(2) * t.dim(3);
    std::memcpy(r.data<float>(), t.data<float>() + (b * S + first) * row, size_t(n * row) * sizeof(float));
    return r;
  };
  Tensor out, lse;
  kernel<AttentionKernel>("cpu").forward(ExecContext::host(), part(q), part(k), part(v), scale, out, lse);
  return out;
}

}  // namespace

// A bf16 cache (generation with bf16 matmuls) is checked against the causal op on the keys and
// values rounded to bf16 and widened back: the same f32 arithmetic on the same values.
class AttentionCached : public ::testing::TestWithParam<DType> {};

TEST_P(AttentionCached, EqualsCausalAttentionOnEachUnpaddedRow) {
  const DType dt = GetParam();
  // D 128 with groups of 4 (the AVX2 passes: 8-key score blocks, 3 + 1 heads of p.V; AVX-512: two
  // pairs), D 12 (no 8-column vectors) with groups of 3, D 256 with a group of 3 (AVX-512: a pair
  // and a single head, two 128-column passes of p.V), D 160 (a 128- and a 32-column pass), D 40
  // and 16 (f32 on AVX-512, bf16 on the AVX2 passes), and small shapes.
  for (const Case& c : {Case{3, 37, 4, 2, 16, {0, 5, 36}}, Case{1, 70, 6, 3, 8, {0}}, Case{2, 20, 2, 2, 64, {3, 0}},
                        Case{1, 41, 8, 2, 128, {0}}, Case{2, 19, 6, 2, 12, {2, 0}}, Case{1, 45, 4, 2, 40, {0}},
                        Case{1, 29, 3, 1, 256, {0}}, Case{2, 23, 2, 2, 160, {4, 0}}}) {
    SCOPED_TRACE("B" + std::to_string(c.B) + " S" + std::to_string(c.S) + " Hq" + std::to_string(c.Hq));
    const int64_t cap = c.S + 5, row = c.Hkv * c.D;
    const float scale = 1.f / std::sqrt(float(c.D));
    Tensor q = randn({c.B, c.S, c.Hq, c.D}, 1), k = randn({c.B, c.S, c.Hkv, c.D}, 2), v = randn({c.B, c.S, c.Hkv, c.D}, 3);
    if (dt == DType::BF16) k = k.to(DType::BF16).to(DType::F32), v = v.to(DType::BF16).to(DType::F32);
    // The cache is [B, Hkv, cap, D]: column s of kv head g of row b at ((b * Hkv + g) * cap + s) * D.
    Tensor kc = Tensor::empty({c.B, c.Hkv, cap, c.D}, DType::F32), vc = Tensor::empty(kc.shape(), DType::F32);
    kc.fill_(1e30f), vc.fill_(1e30f);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t s = c.first[size_t(b)]; s < c.S; ++s)
        for (int64_t g = 0; g < c.Hkv; ++g) {
          const int64_t dst = ((b * c.Hkv + g) * cap + s) * c.D, src = (b * c.S + s) * row + g * c.D;
          std::memcpy(kc.data<float>() + dst, k.data<float>() + src, c.D * sizeof(float));
          std::memcpy(vc.data<float>() + dst, v.data<float>() + src, c.D * sizeof(float));
        }
    if (dt == DType::BF16) kc = kc.to(DType::BF16), vc = vc.to(DType::BF16);  // exact: the values are bf16's
    std::vector<Tensor> ref;
    for (int64_t b = 0; b < c.B; ++b) ref.push_back(row_reference(q, k, v, b, c.first[size_t(b)], scale));
    const int64_t qrow = c.Hq * c.D;
    double worst = 0;
    // Chunks of `S_new` new columns ending at column `end` - 1 (the cache then holds `end` columns).
    auto check = [&](int64_t end, int64_t S_new) {
      Tensor qn = Tensor::empty({c.B, S_new, c.Hq, c.D}, DType::F32), out = Tensor::empty(qn.shape(), DType::F32);
      for (int64_t b = 0; b < c.B; ++b)
        std::memcpy(qn.data<float>() + b * S_new * qrow, q.data<float>() + (b * c.S + end - S_new) * qrow,
                    size_t(S_new * qrow) * sizeof(float));
      for (const bool avx512 : {true, false}) {  // false: the AVX2 passes (true is them too without AVX-512)
        attention_cached(RowView::of(qn, c.Hq, c.D), kc, vc, c.first.data(), end, S_new, scale, out, avx512);
        for (int64_t b = 0; b < c.B; ++b)
          for (int64_t s = 0; s < S_new; ++s) {
            const int64_t col = end - S_new + s, i = col - c.first[size_t(b)];
            for (int64_t e = 0; e < qrow; ++e)
              worst = std::max(worst, double(std::fabs(out.data<float>()[(b * S_new + s) * qrow + e] -
                                                       ref[size_t(b)].data<float>()[i * qrow + e])));
          }
      }
    };
    const int64_t lo = *std::max_element(c.first.begin(), c.first.end());
    for (int64_t end = lo + 1; end <= c.S; ++end) check(end, 1);
    check(c.S, std::min<int64_t>(4, c.S - lo));
    EXPECT_LT(worst, 2e-6);  // unit-normal values; summation order differs from the tiled kernel
  }
}

INSTANTIATE_TEST_SUITE_P(CacheDType, AttentionCached, ::testing::Values(DType::F32, DType::BF16),
                         [](const ::testing::TestParamInfo<DType>& i) { return std::string(dtype_name(i.param)); });

TEST(AttentionCachedArgs, BadArgumentsAreErrors) {
  Tensor kc = Tensor::zeros({2, 1, 8, 4}, DType::F32), vc = Tensor::zeros({2, 1, 8, 4}, DType::F32);
  Tensor q = Tensor::zeros({2, 1, 2, 4}, DType::F32), out = Tensor::empty({2, 1, 2, 4}, DType::F32);
  auto err = [&](std::vector<int64_t> first, int64_t n, const Tensor& kk) {
    try {
      attention_cached(RowView::of(q, 2, 4), kk, vc, first.data(), n, 1, 0.5f, out);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(err({0, 1}, 3, kc), "");
  EXPECT_NE(err({0, 3}, 3, kc).find("row 1 starts at column 3, after its first new token (column 2)"),
            std::string::npos);
  EXPECT_NE(err({0, 0}, 9, kc).find("9 cached columns do not fit"), std::string::npos);
  EXPECT_NE(err({0, 0}, 3, Tensor::zeros({2, 2, 8, 4}, DType::F32)).find("must be two f32"), std::string::npos);
  EXPECT_NE(err({0, 0}, 3, kc.to(DType::BF16)).find("must be two f32 or two bf16"), std::string::npos);
  EXPECT_EQ(err({0, 0}, 3, Tensor::zeros({2, 1, 8, 4}, DType::F32)), "");
}
