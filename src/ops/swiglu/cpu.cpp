// SwiGLU, cpu variant: one pass per direction over row blocks, 8 lanes at a time (AVX2, the exp
// of vec_math.h; the row tail goes through masked loads so it sees the same arithmetic) or 16 with
// AVX-512 (swiglu_rows.avx512.cpp, same arithmetic, chosen at run time), f32 throughout as torch's
// f32 silu x / (1 + exp(-x)):
//   forward:  out = g / (1 + e^-g) * u
//   backward: s = 1 / (1 + e^-g); dg = dout * u * s * (1 + g (1 - s)); du = dout * g * s
// Elementwise, so independent of the thread count. dgu may alias gu (every lane is loaded before
// it is stored). A BF16 out / dgu row is computed in f32 into a per-thread row and rounded from
// there (the same f32 values, rounded to nearest even).
#include <vector>

#include "core/cpu_features.h"
#include "core/threading.h"
#include "ops/matmul/bf16_convert.h"
#include "ops/op_checks.h"
#include "ops/swiglu/checks.h"
#include "ops/swiglu/swiglu.h"
#include "ops/swiglu/swiglu_rows.h"
#include "ops/vec_math.h"

namespace titan::swiglu_detail {
namespace {

inline __m256 silu8(__m256 g) {
  const __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(g, _mm256_add_ps(one, vmath::exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
}

void forward_row(const float* g, const float* u, float* y, int64_t I) {
  int64_t j = 0;
  for (; j + 8 <= I; j += 8)
    _mm256_storeu_ps(y + j, _mm256_mul_ps(silu8(_mm256_loadu_ps(g + j)), _mm256_loadu_ps(u + j)));
  if (j < I) {
    const __m256i m = vmath::first_lanes(I - j);
    _mm256_maskstore_ps(y + j, m, _mm256_mul_ps(silu8(_mm256_maskload_ps(g + j, m)), _mm256_maskload_ps(u + j, m)));
  }
}

// One 8-lane step of the backward. kTail: masked loads/stores (lanes in `m`) for the row's last
// partial block; full blocks use plain ones (AMD's masked stores are slow).
template <bool kTail>
inline void backward8(const float* g, const float* u, const float* dy, float* dg, float* du, __m256i m) {
  auto load = [&](const float* x) { return kTail ? _mm256_maskload_ps(x, m) : _mm256_loadu_ps(x); };
  auto store = [&](float* x, __m256 y) {
    if constexpr (kTail) _mm256_maskstore_ps(x, m, y);
    else _mm256_storeu_ps(x, y);
  };
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 gv = load(g), uv = load(u), dv = load(dy);
  const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, vmath::exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv))));
  // dg = dout * u * s * (1 + g * (1 - s)), evaluated left to right as the reference formula
  const __m256 dsilu = _mm256_add_ps(one, _mm256_mul_ps(gv, _mm256_sub_ps(one, s)));
  store(dg, _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(dv, uv), s), dsilu));
  store(du, _mm256_mul_ps(_mm256_mul_ps(dv, gv), s));
}

void backward_row(const float* g, const float* u, const float* dy, float* dg, float* du, int64_t I) {
  int64_t j = 0;
  for (; j + 8 <= I; j += 8) backward8<false>(g + j, u + j, dy + j, dg + j, du + j, __m256i{});
  if (j < I) backward8<true>(g + j, u + j, dy + j, dg + j, du + j, vmath::first_lanes(I - j));
}

const RowFns kAvx2{forward_row, backward_row};

}  // namespace

const RowFns& rows_avx2() { return kAvx2; }

const RowFns& rows() {
  static const RowFns* best = cpu_has_avx512() ? rows_avx512() : &kAvx2;
  return *best;
}

}  // namespace titan::swiglu_detail

namespace titan {
namespace {

// Rows per parallel task: about 16K output elements each.
int64_t grain_rows(int64_t I) { return I >= 16384 ? 1 : 16384 / I; }

void forward(const ExecContext& ctx, const Tensor& gu, Tensor& out) {
  opcheck::host_context(ctx, "swiglu.cpu");
  const auto [N, I] = swiglu_detail::check(gu, out, "out", true);
  const float* in = gu.data<float>();  // [N, 2I]
  const swiglu_detail::RowFns& fns = swiglu_detail::rows();
  if (out.dtype() == DType::BF16) {  // each row computed in f32 (L1) and rounded from there
    uint16_t* y = static_cast<uint16_t*>(out.raw());  // [N, I] bf16
    parallel_for(N, grain_rows(I), [&](int64_t n0, int64_t n1) {
      std::vector<float> row(static_cast<size_t>(I));
      for (int64_t n = n0; n < n1; ++n) {
        fns.forward(in + n * 2 * I, in + n * 2 * I + I, row.data(), I);
        f32_to_bf16_row(row.data(), y + n * I, size_t(I));
      }
    });
    return;
  }
  float* y = out.data<float>();  // [N, I]
  parallel_for(N, grain_rows(I), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) fns.forward(in + n * 2 * I, in + n * 2 * I + I, y + n * I, I);
  });
}

void backward(const ExecContext& ctx, const Tensor& gu, const Tensor& dout, Tensor& dgu) {
  opcheck::host_context(ctx, "swiglu.cpu");
  const auto [N, I] = swiglu_detail::check(gu, dout, "dout");
  swiglu_detail::check_dgu(gu, dgu);
  const float* in = gu.data<float>();   // [N, 2I]
  const float* dy = dout.data<float>(); // [N, I]
  const swiglu_detail::RowFns& fns = swiglu_detail::rows();
  if (dgu.dtype() == DType::BF16) {
    uint16_t* d = static_cast<uint16_t*>(dgu.raw());  // [N, 2I] bf16
    parallel_for(N, grain_rows(I), [&](int64_t n0, int64_t n1) {
      std::vector<float> row(size_t(2 * I));
      for (int64_t n = n0; n < n1; ++n) {
        const float* g = in + n * 2 * I;
        fns.backward(g, g + I, dy + n * I, row.data(), row.data() + I, I);
        f32_to_bf16_row(row.data(), d + n * 2 * I, size_t(2 * I));
      }
    });
    return;
  }
  float* d = dgu.data<float>();  // [N, 2I]
  parallel_for(N, grain_rows(I), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* g = in + n * 2 * I;
      float* dg = d + n * 2 * I;
      fns.backward(g, g + I, dy + n * I, dg, dg + I, I);
    }
  });
}

const SwiGLUKernel kCpu{"cpu", forward, backward};

}  // namespace
TITAN_REGISTER_KERNEL(SwiGLUKernel, "cpu", DeviceType::CPU, kCpu);
}  // namespace titan
