#include "core/rng.h"

#include <cmath>

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

double Philox::normal(uint64_t i) const {
  uint32_t w[4];
  block(i, w);
  double u1 = (double(uint64_t(w[0]) << 21 ^ w[1]) + 0.5) / 9007199254740992.0;  // 53-bit
  double u2 = (double(w[2]) + 0.5) / 4294967296.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

uint64_t stream_id(const char* name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char* p = name; *p; ++p) h = (h ^ uint8_t(*p)) * 1099511628211ull;
  return h;
}

// mean + std * x and lo + (hi - lo) * u are written as fused multiply-adds (std::fma): one
// rounding, as the x86-64-v3 build's contraction has always computed them, now on every target
// whether the compiler contracts or not, so a seed gives the same weights everywhere.
void fill_normal(Tensor& t, double mean, double std, const Philox& rng) {
  float* p = t.data<float>();
  parallel_for(t.numel(), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = float(std::fma(std, rng.normal(uint64_t(i)), mean));
  });
}

void fill_trunc_normal(Tensor& t, double mean, double std, double a, double b, const Philox& rng) {
  float* p = t.data<float>();
  const uint64_t n = uint64_t(t.numel());
  parallel_for(t.numel(), 1 << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      // Redraw from disjoint counter ranges (attempt k uses counter i + k*n) until inside [a, b].
      double v = std::fma(std, rng.normal(uint64_t(i)), mean);
      for (uint64_t k = 1; (v < a || v > b) && k < 1000; ++k) v = std::fma(std, rng.normal(uint64_t(i) + k * n), mean);
      p[i] = float(v < a ? a : (v > b ? b : v));
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
