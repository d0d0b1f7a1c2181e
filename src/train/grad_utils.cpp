#include "train/grad_utils.h"

#include <immintrin.h>

#include <atomic>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/threading.h"

namespace titan {
namespace {

constexpr int64_t kChunk = 1 << 16;

// Sum of squares of p[0..n) in double; fixed lane assignment and reduction order.
double sum_squares(const float* p, int64_t n) {
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

// Any element with all exponent bits set (Inf or NaN)? Integer ops only, so it vectorizes.
bool has_non_finite_f32(const uint32_t* p, int64_t n) {
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) any |= uint32_t((p[i] & 0x7f800000u) == 0x7f800000u);
  return any != 0;
}
bool has_non_finite_16(const uint16_t* p, int64_t n, uint16_t exp_mask) {
  uint32_t any = 0;
  for (int64_t i = 0; i < n; ++i) any |= uint32_t((p[i] & exp_mask) == exp_mask);
  return any != 0;
}

struct Chunk {
  const NamedTensor* t;
  int64_t begin, end;
};

std::vector<Chunk> f32_chunks(const std::vector<NamedTensor>& ts, const char* what) {
  std::vector<Chunk> cs;
  for (auto& t : ts) {
    TITAN_CHECK(t.tensor.defined(), what, ": tensor '", t.name, "' is undefined");
    TITAN_CHECK(t.tensor.dtype() == DType::F32, what, ": tensor '", t.name, "' is ", dtype_name(t.tensor.dtype()),
                ", expected f32");
    for (int64_t b = 0; b < t.tensor.numel(); b += kChunk)
      cs.push_back({&t, b, std::min(b + kChunk, t.tensor.numel())});
  }
  return cs;
}

}  // namespace

double global_l2_norm(const std::vector<NamedTensor>& grads) {
  std::vector<Chunk> cs = f32_chunks(grads, "gradient norm");
  std::vector<double> part(cs.size());
  parallel_for(int64_t(cs.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const float* p = cs[c].t->tensor.data<float>();
      part[c] = sum_squares(p + cs[c].begin, cs[c].end - cs[c].begin);
    }
  });
  double s = 0;
  for (double v : part) s += v;  // in chunk order: the same result for any thread count
  return std::sqrt(s);
}

double clip_grad_norm_(const std::vector<NamedTensor>& grads, double max_norm) {
  double total = global_l2_norm(grads);
  if (!std::isfinite(total)) return total;
  double coef = max_norm / (total + 1e-6);
  if (coef >= 1.0) return total;
  float c = float(coef);
  std::vector<Chunk> cs = f32_chunks(grads, "gradient clipping");
  parallel_for(int64_t(cs.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) scale_inplace(cs[k].t->tensor.data<float>() + cs[k].begin, cs[k].end - cs[k].begin, c);
  });
  return total;
}

std::optional<std::string> first_non_finite(const std::vector<NamedTensor>& tensors) {
  for (auto& t : tensors) {
    if (!t.tensor.defined()) continue;
    DType dt = t.tensor.dtype();
    if (dt != DType::F32 && dt != DType::BF16 && dt != DType::F16) continue;  // integers are always finite
    int64_t n = t.tensor.numel();
    std::atomic<bool> bad{false};
    parallel_for(n, kChunk, [&](int64_t b, int64_t e) {
      if (bad.load(std::memory_order_relaxed)) return;
      bool found = false;
      if (dt == DType::F32) found = has_non_finite_f32(static_cast<const uint32_t*>(t.tensor.raw()) + b, e - b);
      else
        found = has_non_finite_16(static_cast<const uint16_t*>(t.tensor.raw()) + b, e - b,
                                  dt == DType::BF16 ? uint16_t(0x7f80) : uint16_t(0x7c00));
      if (found) bad.store(true, std::memory_order_relaxed);
    });
    if (bad.load()) return t.name;
  }
  return std::nullopt;
}

}  // namespace titan
