#include "core/rng.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu_features.h"
#include "core/rng_normal.h"
#include "core/threading.h"

namespace titan {

void Philox::block(uint64_t ctr, uint32_t out[4]) const {
  uint32_t c0 = uint32_t(ctr), c1 = uint32_t(ctr >> 32), c2 = uint32_t(stream), c3 = uint32_t(stream >> 32);
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n1 = uint32_t(p1);
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    uint32_t n3 = uint32_t(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

static inline float u32_to_unit(uint32_t x) { return (float(x >> 8) + 0.5f) * (1.0f / 16777216.0f); }

float Philox::uniform(uint64_t i) const {
  uint32_t w[4];
  block(i, w);
  return u32_to_unit(w[0]);
}

namespace rng_detail {

// The normal of one block, as core/rng_normal.h writes it (host flags: no contraction, so each
// step rounds once; every fused multiply-add is std::fma).
double box_muller(const uint32_t w[4]) {
  const uint64_t v = uint64_t(w[0]) << 21 ^ w[1];  // 53 bits
  const double u1 = (double(v) + 0.5) * kTwoM53, u2 = (double(w[2]) + 0.5) * kTwoM32;
  // log(u1): u1 = 2^e m with m in [1, 2), then m in (sqrt(2)/2, sqrt(2)].
  uint64_t bits;
  std::memcpy(&bits, &u1, sizeof bits);
  double e = double(bits >> 52) - 1023.0;
  bits = (bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;
  double m;
  std::memcpy(&m, &bits, sizeof m);
  if (m > kSqrt2) m = m * 0.5, e = e + 1.0;
  const double s = (m - 1.0) / (m + 1.0), w2 = s * s, s2 = 2.0 * s;
  double q = kAtanh[10];
  for (int k = 9; k >= 0; --k) q = std::fma(q, w2, kAtanh[k]);
  const double log_u1 = std::fma(e, kLn2Hi, std::fma(e, kLn2Lo, std::fma(s2 * w2, q, s2)));
  // cos(2 pi u2) from the quadrant q4 and t = u2 - q4 / 4.
  const uint64_t q4 = (uint64_t(w[2]) + (1u << 29)) >> 30;
  const double t = u2 - double(q4) * 0.25, t2 = t * t;
  double c = kCos[8], sn = kSin[8];
  for (int k = 7; k >= 0; --k) c = std::fma(c, t2, kCos[k]), sn = std::fma(sn, t2, kSin[k]);
  sn = sn * t;
  const double cs = (q4 & 1) ? sn : c;
  return std::sqrt(-2.0 * log_u1) * (((q4 + 1) & 2) ? -cs : cs);
}

}  // namespace rng_detail

double Philox::normal(uint64_t i) const {
  uint32_t w[4];
  block(i, w);
  return rng_detail::box_muller(w);
}

void Philox::normals(uint64_t first, int64_t n, double* out, double std, double mean) const {
  int64_t done = cpu_has_avx2_fma() ? rng_detail::normals_avx2(*this, first, n, out, std, mean) : 0;
  for (int64_t j = done; j < n; ++j) out[j] = std::fma(std, normal(first + uint64_t(j)), mean);
}

uint64_t stream_id(const char* name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char* p = name; *p; ++p) h = (h ^ uint8_t(*p)) * 1099511628211ull;
  return h;
}

// Normals are drawn in batches of kBatch counters (Philox::normals: 4 lanes at a time on AVX2).
constexpr int64_t kBatch = 512;

// mean + std * x and lo + (hi - lo) * u are written as fused multiply-adds (std::fma, or the
// AVX2 kernel's): one rounding, as the x86-64-v3 build's contraction has always computed them,
// now on every target whether the compiler contracts or not, so a seed gives the same weights
// everywhere.

void fill_normal(Tensor& t, double mean, double std, const Philox& rng) {
  float* p = t.data<float>();
  parallel_for(t.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    double z[kBatch];
    for (int64_t i0 = b; i0 < e; i0 += kBatch) {
      const int64_t n = std::min(kBatch, e - i0);
      rng.normals(uint64_t(i0), n, z, std, mean);
      for (int64_t j = 0; j < n; ++j) p[i0 + j] = float(z[j]);
    }
  });
}

void fill_trunc_normal(Tensor& t, double mean, double std, double a, double b, const Philox& rng) {
  float* p = t.data<float>();
  const uint64_t n = uint64_t(t.numel());
  parallel_for(t.numel(), 1 << 16, [&](int64_t lo, int64_t hi) {
    double z[kBatch];
    for (int64_t i0 = lo; i0 < hi; i0 += kBatch) {
      const int64_t m = std::min(kBatch, hi - i0);
      rng.normals(uint64_t(i0), m, z, std, mean);
      for (int64_t j = 0; j < m; ++j) {
        const uint64_t i = uint64_t(i0 + j);
        // Redraw from disjoint counter ranges (attempt k uses counter i + k*n) until inside [a, b].
        double v = z[j];
        for (uint64_t k = 1; (v < a || v > b) && k < 1000; ++k) v = std::fma(std, rng.normal(i + k * n), mean);
        p[i] = float(v < a ? a : (v > b ? b : v));
      }
    }
  });
}

void fill_uniform(Tensor& t, double lo, double hi, const Philox& rng) {
  float* p = t.data<float>();
  parallel_for(t.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = float(std::fma(hi - lo, double(rng.uniform(uint64_t(i))), lo));
  });
}

}  // namespace titan
