// foreach_sum_squares / foreach_scale (foreach.h): AVX2 over fixed chunks on the CPU; ranges in GPU
// memory (ctx.device cuda:0) go to the kernels of ops/cuda/foreach.cuh (device.h).
#include <immintrin.h>

#include <algorithm>

#include "core/error.h"
#include "core/threading.h"
#include "ops/foreach/device.h"
#include "ops/foreach/foreach.h"
#include "ops/op_checks.h"

namespace titan {
namespace {

constexpr int64_t kChunk = 1 << 16;

// Sum of squares of p[0..n) in double; fixed lane assignment and reduction order.
double chunk_sum_squares(const float* p, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_loadu_ps(p + i);
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    a0 = _mm256_fmadd_pd(lo, lo, a0);
    a1 = _mm256_fmadd_pd(hi, hi, a1);
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, _mm256_add_pd(a0, a1));
  double s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) s += double(p[i]) * double(p[i]);
  return s;
}

void scale_inplace(float* p, int64_t n, float c) {
  __m256 vc = _mm256_set1_ps(c);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(p + i, _mm256_mul_ps(_mm256_loadu_ps(p + i), vc));
  for (; i < n; ++i) p[i] *= c;
}

std::vector<FloatRange> chunks(const std::vector<FloatRange>& ranges) {
  std::vector<FloatRange> cs;
  for (const FloatRange& g : ranges)
    for (int64_t b = 0; b < g.n; b += kChunk) cs.push_back({g.data + b, std::min(kChunk, g.n - b)});
  return cs;
}

void check_cpu(const ExecContext& ctx, const char* who) {
  opcheck::host_context(ctx, who);
}

}  // namespace

double foreach_sum_squares(const ExecContext& ctx, const std::vector<FloatRange>& ranges) {
  if (ctx.device.type == DeviceType::CUDA) return foreach_detail::sum_squares_cuda(ctx, ranges);
  check_cpu(ctx, "foreach_sum_squares");
  const std::vector<FloatRange> cs = chunks(ranges);
  std::vector<double> part(cs.size());
  parallel_for(int64_t(cs.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) part[size_t(c)] = chunk_sum_squares(cs[size_t(c)].data, cs[size_t(c)].n);
  });
  double s = 0;
  for (double v : part) s += v;  // in chunk order: the same result for any thread count
  return s;
}

void foreach_scale(const ExecContext& ctx, const std::vector<FloatRange>& ranges, float c) {
  if (ctx.device.type == DeviceType::CUDA) return foreach_detail::scale_cuda(ctx, ranges, c);
  check_cpu(ctx, "foreach_scale");
  const std::vector<FloatRange> cs = chunks(ranges);
  parallel_for(int64_t(cs.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) scale_inplace(cs[size_t(k)].data, cs[size_t(k)].n, c);
  });
}

}  // namespace titan
