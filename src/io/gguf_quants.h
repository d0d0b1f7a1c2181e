// ggml's tensor types as GGUF stores them (block size in elements, block size in bytes) and
// dequantization to f32 of the ones titan imports. The block layouts and formulas are ggml's
// (documented in the gguf Python package, gguf-py/gguf/quants.py); each f32 result is computed
// with the same operations in the same order as that reference, without fused multiply-adds, so
// the values match it exactly (tests/unit/io/test_gguf.cpp, fixtures from tools/oracle/gguf_fixtures.py).
//
// Dequantized types: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (32-element blocks: an f16 scale
// d, for _1 types an f16 minimum m, 4/5/8-bit quants: x = d * q (+ m)), and the K-quants of
// 256-element super-blocks: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (sub-block scales of 4-8 bits under f16
// super-scales) and Q8_K (f32 d, int8 quants, the block sums ignored). Other known types (IQ*,
// TQ*, Q8_1, integer types, ...) are recognised for validation but refused by dequantize.
#pragma once
#include <cstdint>

namespace titan {

enum GgmlType : uint32_t {
  kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ4_1 = 3, kGgmlQ5_0 = 6, kGgmlQ5_1 = 7, kGgmlQ8_0 = 8,
  kGgmlQ8_1 = 9, kGgmlQ2_K = 10, kGgmlQ3_K = 11, kGgmlQ4_K = 12, kGgmlQ5_K = 13, kGgmlQ6_K = 14, kGgmlQ8_K = 15,
  kGgmlBF16 = 30
};

struct GgmlTypeInfo {
  const char* name;
  int64_t block;      // elements per block
  int64_t type_size;  // bytes per block
  bool dequantizable;
};

// nullptr for an unknown type id.
const GgmlTypeInfo* ggml_type_info(uint32_t type);

// dst[0, n) = the n elements (a whole number of blocks) stored at src in `type`; error when the
// type cannot be dequantized. Blocks are split over threads (the result does not depend on it).
void ggml_dequantize(uint32_t type, const void* src, int64_t n, float* dst);

}  // namespace titan
