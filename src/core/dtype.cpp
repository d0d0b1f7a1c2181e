#include "core/dtype.h"

#include <cmath>

#include "core/error.h"

namespace titan {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

bool parse_dtype(std::string_view s, DType* out) {
  struct Name {
    const char* name;
    DType t;
  };
  static const Name names[] = {{"f32", DType::F32},       {"float32", DType::F32},  {"fp32", DType::F32},
                               {"bf16", DType::BF16},     {"bfloat16", DType::BF16}, {"f16", DType::F16},
                               {"float16", DType::F16},   {"fp16", DType::F16},     {"i32", DType::I32},
                               {"int32", DType::I32},     {"i64", DType::I64},      {"int64", DType::I64}};
  for (const auto& n : names)
    if (s == n.name) {
      *out = n.t;
      return true;
    }
  return false;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalize
      int e = -1;
      do {
        man <<= 1;
        ++e;
      } while (!(man & 0x400u));
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (absu >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow (>= 65520) -> inf
  if (absu < 0x38800000u) {                                  // below smallest normal: subnormal
    // value = absf * 2^24 rounded to nearest even as an integer count of 2^-24 units
    float a;
    std::memcpy(&a, &absu, 4);
    float scaled = a * 16777216.0f;  // exact power-of-two scaling
    float r = std::nearbyint(scaled);
    return uint16_t(sign | uint32_t(r));
  }
  uint32_t exp = ((absu >> 23) - 127 + 15);
  uint32_t man = absu & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: correct
  return uint16_t(sign | h);
}

void convert_floats(const void* src, DType st, void* dst, DType dt, size_t n) {
  if (st == dt) {
    std::memcpy(dst, src, n * dtype_size(st));
    return;
  }
  auto load = [&](size_t i) -> float {
    switch (st) {
      case DType::F32: return static_cast<const float*>(src)[i];
      case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
      case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(src)[i]);
      default: TITAN_ASSERT(false, "convert_floats: non-float source");
    }
  };
  switch (dt) {
    case DType::F32: {
      float* d = static_cast<float*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = load(i);
      return;
    }
    case DType::BF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(load(i));
      return;
    }
    case DType::F16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(load(i));
      return;
    }
    default: TITAN_ASSERT(false, "convert_floats: non-float destination");
  }
}

}  // namespace titan
