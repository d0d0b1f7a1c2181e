// Counter-based random numbers (Philox4x32-10): element i of a stream is a pure function of
// (seed, stream, i), so initialization is identical for any thread count or tensor split.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace titan {

struct Philox {
  uint64_t seed;
  uint64_t stream;
  // Four independent 32-bit words for counter value `ctr`.
  void block(uint64_t ctr, uint32_t out[4]) const;
  // Uniform in (0, 1), 24-bit resolution, never 0 (safe for log).
  float uniform(uint64_t i) const;
  // Standard normal (Box-Muller on three words of block i; core/rng_normal.h: plain IEEE
  // arithmetic, no libm, so the same bits on every CPU).
  double normal(uint64_t i) const;
  // std::fma(std, normal(first + j), mean) for j < n into out[j]: the same values, 4 at a time
  // where the CPU has AVX2 + FMA.
  void normals(uint64_t first, int64_t n, double* out, double std = 1.0, double mean = 0.0) const;
};

namespace rng_detail {
double box_muller(const uint32_t w[4]);  // normal() of the block w
// normals() of the first n - n % 4 counters on AVX2 + FMA (core/rng.avx2.cpp); returns how many.
int64_t normals_avx2(const Philox& rng, uint64_t first, int64_t n, double* out, double std, double mean);
}  // namespace rng_detail

// Stable 64-bit hash of a name, to derive per-parameter streams ("model.layers.0.mlp...").
uint64_t stream_id(const char* name);

// Fill an f32 tensor. trunc_normal redraws (with the next counters) until inside [a, b] std units
// scaled: values are mean + std * z with z restricted to [a/std - mean/std, ...], as torch's
// trunc_normal_(mean, std, a, b) bounds the value itself to [a, b].
void fill_normal(Tensor& t, double mean, double std, const Philox& rng);
void fill_trunc_normal(Tensor& t, double mean, double std, double a, double b, const Philox& rng);
void fill_uniform(Tensor& t, double lo, double hi, const Philox& rng);

}  // namespace titan
