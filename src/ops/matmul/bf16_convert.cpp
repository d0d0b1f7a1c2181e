#include "ops/matmul/bf16_convert.h"

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/threading.h"

namespace titan {
namespace detail {
void f32_to_bf16_avx512(const float* src, uint16_t* dst, size_t n);
}

void f32_to_bf16_array(const float* src, uint16_t* dst, size_t n, bool allow_avx512) {
  // 64K elements per chunk: large enough to amortize scheduling, small enough to balance 2+ threads.
  constexpr int64_t kGrain = 1 << 16;
  const bool vec = allow_avx512 && cpu_has_avx512();
  parallel_for(int64_t(n), kGrain, [&](int64_t b, int64_t e) {
    if (vec) {
      detail::f32_to_bf16_avx512(src + b, dst + b, size_t(e - b));
    } else {
      for (int64_t i = b; i < e; ++i) dst[i] = f32_to_bf16(src[i]);
    }
  });
}

void f32_to_bf16_row(const float* src, uint16_t* dst, size_t n) {
  if (cpu_has_avx512()) return detail::f32_to_bf16_avx512(src, dst, n);
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

Tensor to_bf16(const Tensor& t) {
  if (t.dtype() == DType::BF16) return t;
  TITAN_CHECK(t.dtype() == DType::F32, "bf16 conversion: expected an f32 or bf16 tensor, got ", t.str());
  Tensor out = Tensor::empty(t.shape(), DType::BF16, t.device());
  f32_to_bf16_array(t.data<float>(), reinterpret_cast<uint16_t*>(out.raw()), size_t(t.numel()));
  return out;
}

}  // namespace titan
