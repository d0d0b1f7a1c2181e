// Element types. bf16 and f16 are stored as raw 16-bit patterns; conversions are exact for the
// widening direction and round-to-nearest-even for narrowing, as PyTorch does.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace titan {

enum class DType : uint8_t { F32, BF16, F16, I32, I64 };

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

size_t dtype_size(DType t);
const char* dtype_name(DType t);            // "f32", "bf16", ...
bool parse_dtype(std::string_view s, DType* out);  // accepts f32/float32/bf16/bfloat16/f16/float16/i32/i64

inline float bf16_to_f32(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                         // round to nearest even
  return uint16_t(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Bulk conversions between any two floating dtypes (f32, bf16, f16); n elements.
void convert_floats(const void* src, DType src_t, void* dst, DType dst_t, size_t n);

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::F32;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::BF16;
};
template <>
struct dtype_of<f16> {
  static constexpr DType value = DType::F16;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::I32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::I64;
};

}  // namespace titan
