#include <gtest/gtest.h>

#include <cmath>

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
