#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/allocator.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/threading.h"
#include "util/strings.h"

using namespace titan;

TEST(DType, Bf16RoundTripAndRounding) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (down to 1.0).
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.00390625f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.01171875f)), 1.015625f);  // halfway, rounds up to even
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

TEST(DType, F16RoundTrip) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f, 0.333251953125f})
    EXPECT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
  EXPECT_TRUE(std::isinf(f16_to_f32(f32_to_f16(1e6f))));
}

TEST(Tensor, ViewsShareStorageAndAllocatorCounts) {
  auto before = cpu_allocator().stats().live_bytes;
  {
    Tensor t = Tensor::zeros({4, 3}, DType::F32);
    EXPECT_EQ(cpu_allocator().stats().live_bytes, before + 48);
    Tensor r = t.slice0(1, 3);
    r.data<float>()[0] = 5.f;
    EXPECT_EQ(t.data<float>()[3], 5.f);
    EXPECT_EQ(t.view({-1}).dim(0), 12);
    Tensor b = t.to(DType::BF16);
    EXPECT_EQ(bf16_to_f32(b.data<bf16>()[3].bits), 5.f);
  }
  EXPECT_EQ(cpu_allocator().stats().live_bytes, before);
  EXPECT_GE(cpu_allocator().stats().peak_bytes, before + 48);
}

TEST(Rng, CounterBasedIndependentOfThreads) {
  Philox rng{42, stream_id("w")};
  Tensor a = Tensor::empty({10007}, DType::F32), b = Tensor::empty({10007}, DType::F32);
  set_num_threads(1);
  fill_normal(a, 0, 1, rng);
  set_num_threads(2);
  fill_normal(b, 0, 1, rng);
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    ASSERT_EQ(a.data<float>()[i], b.data<float>()[i]);
    sum += a.data<float>()[i];
    sq += double(a.data<float>()[i]) * a.data<float>()[i];
  }
  EXPECT_NEAR(sum / a.numel(), 0.0, 0.05);
  EXPECT_NEAR(sq / a.numel(), 1.0, 0.05);
  Tensor t = Tensor::empty({5000}, DType::F32);
  fill_trunc_normal(t, 0, 1, -2, 2, rng);
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_LE(std::fabs(t.data<float>()[i]), 2.0f);
}

// Philox::normals (4 lanes on AVX2 + FMA) gives std::fma(std, normal(), mean)'s bits: counters
// crossing 2^32 (the counter's high word), streams with both words set, lengths that leave a
// scalar tail. On a CPU without AVX2 both sides are the scalar form.
TEST(Rng, BatchNormalsEqualScalarNormalsBitForBit) {
  struct Case {
    uint64_t seed, stream, first;
    int64_t n;
    double std, mean;
  } cases[] = {{42, stream_id("model.embed_tokens.weight"), 0, 100003, 1.0, 0.0},
               {0xDEADBEEFCAFEF00Dull, 0xFFFFFFFF00000001ull, (uint64_t(1) << 32) - 5000, 10001, 0.02, 0.0},
               {7, 0, ~uint64_t(0) - 4099, 4099, 0.0625, -0.5}};
  for (const Case& c : cases) {
    Philox rng{c.seed, c.stream};
    std::vector<double> batch(size_t(c.n));
    rng.normals(c.first, c.n, batch.data(), c.std, c.mean);
    for (int64_t j = 0; j < c.n; ++j) {
      const double one = std::fma(c.std, rng.normal(c.first + uint64_t(j)), c.mean);
      ASSERT_EQ(std::memcmp(&one, &batch[size_t(j)], sizeof one), 0)
          << "counter " << c.first + uint64_t(j) << ": " << one << " vs " << batch[size_t(j)];
    }
  }
}

// The Box-Muller normal in plain IEEE arithmetic (core/rng_normal.h) against long-double libm:
// within 8e-16 relative (a few ulps) over random blocks and the edges: the smallest and
// largest u1, u2 at the quadrant boundaries of cos(2 pi u2) and next to them (where cos is near
// 0: relative accuracy there needs the argument reduced exactly, as this form and libm do it).
TEST(Rng, NormalIsBoxMullerWithinUlpsOfLongDoubleLibm) {
  auto reference = [](const uint32_t w[4]) {
    // u1 as the definition rounds it: (double(v) + 0.5) in double (v has 53 bits), then / 2^53.
    const long double u1 = (double(uint64_t(w[0]) << 21 ^ w[1]) + 0.5) / 9007199254740992.0;
    // cos(2 pi u2) from the nearest quarter turn q / 4 (t exact), as libm reduces its argument:
    // cos of the rounded product 2 pi u2 would be relatively inexact next to its zeros.
    const long double u2 = ((long double)w[2] + 0.5L) / 4294967296.0L, q = std::round(4.0L * u2);
    const long double a = 2.0L * 3.14159265358979323846264338327950288L * (u2 - q / 4.0L);
    const int quadrant = int(q) % 4;
    const long double c = quadrant == 0   ? std::cos(a)
                          : quadrant == 1 ? -std::sin(a)
                          : quadrant == 2 ? -std::cos(a)
                                          : std::sin(a);
    return std::sqrt(-2.0L * std::log(u1)) * c;
  };
  std::vector<std::array<uint32_t, 4>> blocks;
  for (uint32_t w01 : {0u, 1u, 0x7FFFFFFFu, 0xFFFFFFFEu, 0xFFFFFFFFu})
    for (uint32_t w2 : {0u, 1u, 0x1FFFFFFFu, 0x20000000u, 0x3FFFFFFFu, 0x40000000u, 0x5FFFFFFFu, 0x60000000u,
                        0x7FFFFFFFu, 0x80000000u, 0x9FFFFFFFu, 0xA0000000u, 0xDFFFFFFFu, 0xE0000000u, 0xFFFFFFFFu})
      blocks.push_back({w01, w01, w2, 0});
  Philox rng{3, 4};
  for (uint64_t i = 0; i < 200000; ++i) {
    std::array<uint32_t, 4> w;
    rng.block(i, w.data());
    blocks.push_back(w);
  }
  double worst = 0;
  for (const auto& w : blocks) {
    const long double ref = reference(w.data());
    const double z = rng_detail::box_muller(w.data());
    const double rel = double(std::fabs((long double)z - ref) / std::fabs(ref));
    worst = std::max(worst, rel);
    ASSERT_LE(rel, 8e-16) << w[0] << " " << w[1] << " " << w[2] << ": " << z << " vs " << double(ref);
  }
  std::printf("box_muller vs long-double libm: worst relative difference %.2e over %zu blocks\n", worst, blocks.size());
}

TEST(Strings, ClosestMatch) {
  EXPECT_EQ(closest_match("lerning_rate", {"lr", "learning_rate", "warmup_steps"}), "learning_rate");
  EXPECT_EQ(closest_match("zzzzzzzz", {"lr"}), "");
}

TEST(Allocator, LargeBlocksAreReusedAndCountedOnce) {
  Allocator& a = cpu_allocator();
  a.empty_cache();
  const size_t live0 = a.stats().live_bytes;
  void* p = a.allocate(3 << 20);
  EXPECT_EQ(a.stats().live_bytes, live0 + (3 << 20));
  a.deallocate(p, 3 << 20);
  EXPECT_EQ(a.stats().live_bytes, live0);
  EXPECT_GE(a.stats().cached_bytes, size_t(3 << 20));
  void* q = a.allocate((3 << 20) - 100);  // same 64 KiB-rounded size: the cached block comes back
  EXPECT_EQ(q, p);
  EXPECT_EQ(a.stats().cached_bytes, 0u);
  a.deallocate(q, (3 << 20) - 100);
  a.empty_cache();
  EXPECT_EQ(a.stats().cached_bytes, 0u);
}
