// Dequantization of ggml block types (formulas and operation order: gguf-py's quants.py, see
// gguf_quants.h). Compiled with -ffp-contract=off (CMakeLists.txt): a fused a * b - c would round
// once instead of twice and differ from the reference in the last bit.
#include "io/gguf_quants.h"

#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/threading.h"

namespace titan {
namespace {

constexpr int64_t QK = 32, QK_K = 256;

float h2f(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// 32-element blocks ------------------------------------------------------------------------------

void deq_q4_0(const uint8_t* b, float* y) {  // d f16, qs[16]: element j low nibble, j + 16 high
  const float d = h2f(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(int(qs[j] & 0x0F) - 8);
    y[j + 16] = d * float(int(qs[j] >> 4) - 8);
  }
}

void deq_q4_1(const uint8_t* b, float* y) {  // d, m f16, qs[16]
  const float d = h2f(b), m = h2f(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = (d * float(qs[j] & 0x0F)) + m;
    y[j + 16] = (d * float(qs[j] >> 4)) + m;
  }
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void deq_q5_0(const uint8_t* b, float* y) {  // d f16, qh u32 (bit j: 5th bit of element j), qs[16]
  const float d = h2f(b);
  const uint32_t qh = load_u32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = int(qs[j] & 0x0F) | int(((qh >> j) & 1) << 4);
    const int hi = int(qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
    y[j] = d * float(lo - 16);
    y[j + 16] = d * float(hi - 16);
  }
}

void deq_q5_1(const uint8_t* b, float* y) {  // d, m f16, qh u32, qs[16]
  const float d = h2f(b), m = h2f(b + 2);
  const uint32_t qh = load_u32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int lo = int(qs[j] & 0x0F) | int(((qh >> j) & 1) << 4);
    const int hi = int(qs[j] >> 4) | int(((qh >> (j + 16)) & 1) << 4);
    y[j] = (d * float(lo)) + m;
    y[j + 16] = (d * float(hi)) + m;
  }
}

void deq_q8_0(const uint8_t* b, float* y) {  // d f16, int8 qs[32]
  const float d = h2f(b);
  for (int j = 0; j < 32; ++j) y[j] = float(int8_t(b[2 + j])) * d;
}

// 256-element super-blocks -----------------------------------------------------------------------

// Q2_K: scales[16] (low nibble scale, high nibble min), qs[64] (2 bits), d, dmin f16. Sub-block g
// of 16: half g / 8 (32 bytes of qs each), shift 2 * ((g % 8) / 2), bytes (g % 2) * 16.
void deq_q2_k(const uint8_t* b, float* y) {
  const uint8_t* sc = b;
  const uint8_t* qs = b + 16;
  const float d = h2f(b + 80), dmin = h2f(b + 82);
  for (int g = 0; g < 16; ++g) {
    const float dl = d * float(sc[g] & 0x0F), ml = dmin * float(sc[g] >> 4);
    const uint8_t* q = qs + (g / 8) * 32 + (g % 2) * 16;
    const int shift = 2 * ((g % 8) / 2);
    for (int l = 0; l < 16; ++l) y[g * 16 + l] = dl * float((q[l] >> shift) & 3) - ml;
  }
}

// Q3_K: hmask[32], qs[64], scales[12] (16 6-bit scales, offset 32), d f16. Sub-block g: low 2 bits
// as Q2_K; the high bit is bit g / 2 of hmask bytes (g % 2) * 16.., and a clear bit subtracts 4.
void deq_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = h2f(b + 108);
  for (int g = 0; g < 16; ++g) {
    const int lo = g < 8 ? (sc[g] & 0x0F) : (sc[g - 8] >> 4);
    const int hi = (sc[8 + g % 4] >> (2 * (g / 4))) & 3;
    const float dl = d * float(int8_t(uint8_t(lo | (hi << 4))) - 32);
    const uint8_t* q = qs + (g / 8) * 32 + (g % 2) * 16;
    const uint8_t* h = hm + (g % 2) * 16;
    const int shift = 2 * ((g % 8) / 2), bit = g / 2;
    for (int l = 0; l < 16; ++l) {
      const int v = int((q[l] >> shift) & 3) - (((h[l] >> bit) & 1) ? 0 : 4);
      y[g * 16 + l] = dl * float(v);
    }
  }
}

// The 8 6-bit scales and mins of Q4_K / Q5_K packed in 12 bytes.
void scale_min_k4(const uint8_t* s, int j, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 2) & 0x30);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 2) & 0x30);
  }
}

// Q4_K: d, dmin f16, scales[12], qs[128]. Sub-block g of 32: bytes (g / 2) * 32.., nibble g % 2.
// Q5_K: d, dmin f16, scales[12], qh[32], qs[128]; the 5th bit of sub-block g is bit g of qh.
// One loop serves both (qh null for Q4_K).
void deq_k4_k5(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y) {
  const float d = h2f(b), dmin = h2f(b + 2);
  const uint8_t* s = b + 4;
  for (int g = 0; g < 8; ++g) {
    int sc, mn;
    scale_min_k4(s, g, &sc, &mn);
    const float dl = d * float(sc), ml = dmin * float(mn);
    const uint8_t* q = qs + (g / 2) * 32;
    const int shift = 4 * (g % 2);
    for (int l = 0; l < 32; ++l) {
      const int v = int((q[l] >> shift) & 0x0F) | (qh ? int(((qh[l] >> g) & 1) << 4) : 0);
      y[g * 32 + l] = dl * float(v) - ml;
    }
  }
}
void deq_q4_k(const uint8_t* b, float* y) { deq_k4_k5(b, nullptr, b + 16, y); }
void deq_q5_k(const uint8_t* b, float* y) { deq_k4_k5(b, b + 16, b + 48, y); }

// Q6_K: ql[128], qh[64], int8 scales[16], d f16. In half h (128 elements), element k = G * 32 + l
// (G < 4): low 4 bits from ql[h * 64 + (G % 2) * 32 + l] (nibble G / 2), high 2 bits from
// qh[h * 32 + l] >> 2G; value - 32, times d * scales[(h * 128 + k) / 16].
void deq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = h2f(b + 208);
  for (int h = 0; h < 2; ++h)
    for (int G = 0; G < 4; ++G)
      for (int l = 0; l < 32; ++l) {
        const int lo = (ql[h * 64 + (G % 2) * 32 + l] >> (4 * (G / 2))) & 0x0F;
        const int hi = (qh[h * 32 + l] >> (2 * G)) & 3;
        const int e = h * 128 + G * 32 + l;
        y[e] = (d * float(sc[e / 16])) * float(int8_t(uint8_t(lo | (hi << 4))) - 32);
      }
}

// Q8_K: f32 d, int8 qs[256], int16 bsums[16] (sums for dot products; not needed here).
void deq_q8_k(const uint8_t* b, float* y) {
  float d;
  std::memcpy(&d, b, 4);
  for (int j = 0; j < QK_K; ++j) y[j] = d * float(int8_t(b[4 + j]));
}

void deq_f16(const uint8_t* b, float* y) { *y = h2f(b); }
void deq_bf16(const uint8_t* b, float* y) {
  uint16_t h;
  std::memcpy(&h, b, 2);
  *y = bf16_to_f32(h);
}
void deq_f32(const uint8_t* b, float* y) { std::memcpy(y, b, 4); }

using BlockFn = void (*)(const uint8_t*, float*);

struct TypeRow {
  uint32_t id;
  GgmlTypeInfo info;
  BlockFn fn;
};

// Type ids, block sizes and byte sizes: ggml's type table (gguf-py's GGML_QUANT_SIZES).
const TypeRow kTypes[] = {
    {0, {"F32", 1, 4, true}, deq_f32},          {1, {"F16", 1, 2, true}, deq_f16},
    {2, {"Q4_0", QK, 18, true}, deq_q4_0},      {3, {"Q4_1", QK, 20, true}, deq_q4_1},
    {6, {"Q5_0", QK, 22, true}, deq_q5_0},      {7, {"Q5_1", QK, 24, true}, deq_q5_1},
    {8, {"Q8_0", QK, 34, true}, deq_q8_0},      {9, {"Q8_1", QK, 40, false}, nullptr},
    {10, {"Q2_K", QK_K, 84, true}, deq_q2_k},   {11, {"Q3_K", QK_K, 110, true}, deq_q3_k},
    {12, {"Q4_K", QK_K, 144, true}, deq_q4_k},  {13, {"Q5_K", QK_K, 176, true}, deq_q5_k},
    {14, {"Q6_K", QK_K, 210, true}, deq_q6_k},  {15, {"Q8_K", QK_K, 292, true}, deq_q8_k},
    {16, {"IQ2_XXS", QK_K, 66, false}, nullptr}, {17, {"IQ2_XS", QK_K, 74, false}, nullptr},
    {18, {"IQ3_XXS", QK_K, 98, false}, nullptr}, {19, {"IQ1_S", QK_K, 50, false}, nullptr},
    {20, {"IQ4_NL", QK, 18, false}, nullptr},   {21, {"IQ3_S", QK_K, 110, false}, nullptr},
    {22, {"IQ2_S", QK_K, 82, false}, nullptr},  {23, {"IQ4_XS", QK_K, 136, false}, nullptr},
    {24, {"I8", 1, 1, false}, nullptr},         {25, {"I16", 1, 2, false}, nullptr},
    {26, {"I32", 1, 4, false}, nullptr},        {27, {"I64", 1, 8, false}, nullptr},
    {28, {"F64", 1, 8, false}, nullptr},        {29, {"IQ1_M", QK_K, 56, false}, nullptr},
    {30, {"BF16", 1, 2, true}, deq_bf16},       {34, {"TQ1_0", QK_K, 54, false}, nullptr},
    {35, {"TQ2_0", QK_K, 66, false}, nullptr},  {39, {"MXFP4", QK, 17, false}, nullptr},
};

const TypeRow* row_of(uint32_t type) {
  for (const auto& r : kTypes)
    if (r.id == type) return &r;
  return nullptr;
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
  const TypeRow* r = row_of(type);
  return r ? &r->info : nullptr;
}

void ggml_dequantize(uint32_t type, const void* src, int64_t n, float* dst) {
  const TypeRow* r = row_of(type);
  TITAN_CHECK(r, "dequantize: unknown ggml type ", type);
  TITAN_CHECK(r->fn, "dequantize: ggml type ", r->info.name, " is not supported (supported: F32, F16, BF16, Q4_0, Q4_1, "
              "Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K)");
  const int64_t bs = r->info.block, ts = r->info.type_size;
  TITAN_CHECK(n >= 0 && n % bs == 0, "dequantize: ", n, " elements are not a whole number of ", r->info.name, " blocks");
  const auto* s = static_cast<const uint8_t*>(src);
  const BlockFn fn = r->fn;
  parallel_for(n / bs, std::max<int64_t>(1, 4096 / bs), [&](int64_t b0, int64_t b1) {
    for (int64_t k = b0; k < b1; ++k) fn(s + k * ts, dst + k * bs);
  });
}

}  // namespace titan
