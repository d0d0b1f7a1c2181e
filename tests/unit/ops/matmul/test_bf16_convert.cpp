// Bulk f32 -> bf16: the AVX-512 path is bit-identical to the scalar titan::f32_to_bf16 on every
// kind of input (ties, subnormals, infinities, NaN) and every tail length.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "ops/matmul/bf16_convert.h"

using namespace titan;

TEST(Bf16Convert, MatchesScalarOnAllKindsOfInput) {
  std::vector<float> v;
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00008000u, 0x00018000u,
                               0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
                               0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffa00000u, 0x7fffffffu, 0x3f800000u};
  for (uint32_t b : specials) {
    float f;
    std::memcpy(&f, &b, 4);
    v.push_back(f);
  }
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = rng();
    float f;
    std::memcpy(&f, &b, 4);
    v.push_back(f);
  }
  std::vector<uint16_t> expect(v.size());
  for (size_t i = 0; i < v.size(); ++i) expect[i] = f32_to_bf16(v[i]);
  for (bool vec : {false, true}) {
    for (size_t n : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(17), size_t(100003), v.size()}) {
      std::vector<uint16_t> out(n + 1, 0xabcd);
      f32_to_bf16_array(v.data(), out.data(), n, vec);
      for (size_t i = 0; i < n; ++i)
        if (out[i] != expect[i]) {
          ADD_FAILURE() << "vec=" << vec << " n=" << n << " i=" << i << " got " << out[i] << " want " << expect[i];
          break;
        }
      EXPECT_EQ(out[n], 0xabcd) << "wrote past the end, n=" << n;
    }
  }
  if (!cpu_has_avx512()) GTEST_LOG_(INFO) << "no AVX-512 here: only the scalar path ran";
}

TEST(Bf16Convert, TensorConversion) {
  Tensor t = Tensor::empty({3, 5}, DType::F32);
  for (int i = 0; i < 15; ++i) t.data<float>()[i] = 1.f + float(i) / 300.f;
  Tensor b = to_bf16(t);
  ASSERT_EQ(b.dtype(), DType::BF16);
  EXPECT_EQ(b.shape(), t.shape());
  for (int i = 0; i < 15; ++i) EXPECT_EQ(b.data<bf16>()[i].bits, f32_to_bf16(t.data<float>()[i]));
  EXPECT_EQ(to_bf16(b).raw(), b.raw());  // already bf16: the same tensor, no copy
  EXPECT_THROW(to_bf16(Tensor::empty({2}, DType::I32)), Error);
}
