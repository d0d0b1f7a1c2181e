// The decode GEMV (gemv.h): operand preparation, the split over N (the bodies are gemv.avx2.cpp
// and gemv.avx512.cpp), and the "gemv" linear variant (forward on this path for every row count,
// backward on the cpu GEMM), which `titan verify kernels` checks against the reference. The cpu linear variant takes
// this path by itself for inputs of at most kGemvMaxRows rows (cpu.cpp).
#include "ops/matmul/gemv.h"

#include <algorithm>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/team.h"
#include "ops/matmul/bf16_convert.h"
#include "ops/matmul/matmul.h"
#include "ops/op_checks.h"

namespace titan {

namespace {

// Weight bytes below which one thread does the whole product (a parallel region costs more than
// reading this much from cache), and the least each chunk of a split gets.
constexpr int64_t kInlineBytes = 256 << 10, kChunkBytes = 64 << 10;

}  // namespace

void linear_forward_gemv(const Tensor& x, const Tensor& w, const Tensor* r, Tensor& y, DType compute,
                         bool allow_avx512, bool allow_dpbf16) {
  TITAN_CHECK(w.defined() && w.ndim() == 2, "linear.gemv: weight must be 2-D [out, in], got ",
              w.defined() ? w.str() : "none");
  TITAN_CHECK(compute == DType::F32 || compute == DType::BF16, "linear.gemv: compute dtype must be f32 or bf16, got ",
              dtype_name(compute));
  const int64_t N = w.dim(0), K = w.dim(1);
  TITAN_CHECK(x.defined() && x.ndim() >= 1 && x.dim(-1) == K, "linear.gemv: input ", x.defined() ? x.str() : "none",
              " must have last dimension ", K);
  const int64_t M = x.numel() / K;
  TITAN_CHECK(y.defined() && y.dtype() == DType::F32 && y.numel() == M * N && y.dim(-1) == N,
              "linear.gemv: output must be f32 [", M, ", ", N, "], got ", y.defined() ? y.str() : "none");
  if (r)
    TITAN_CHECK(r->dtype() == DType::F32 && r->numel() == M * N && r->dim(-1) == N &&
                    r->raw() != y.raw(),
                "linear.gemv: residual input must be f32 of the output's shape (not the output), got ",
                r->str());
  if (compute == DType::F32)
    TITAN_CHECK(x.dtype() == DType::F32 && w.dtype() == DType::F32, "linear.gemv: input ", x.str(), " / weight ",
                w.str(), " with f32 compute must be f32 (pass f32 inputs, or choose bf16 compute)");
  TITAN_CHECK((x.dtype() == DType::F32 || x.dtype() == DType::BF16) && (w.dtype() == DType::F32 || w.dtype() == DType::BF16),
              "linear.gemv: input and weight must be f32 or bf16, got ", x.str(), " and ", w.str());
  if (M == 0 || N == 0) return;
  float* yp = y.data<float>();
  const float* rp = r ? r->data<float>() : nullptr;
  if (K == 0) {
    for (int64_t i = 0; i < M * N; ++i) yp[i] = rp ? rp[i] : 0.f;
    return;
  }
  // x as f32 values (those of its bf16 rounding under bf16 compute); only a few rows, so a copy.
  std::vector<float> xbuf;
  const float* xp = nullptr;
  if (x.dtype() == DType::F32 && compute == DType::F32) {
    xp = x.data<float>();
  } else {
    const Tensor& xc = x;
    xbuf.resize(size_t(M * K));
    for (int64_t i = 0; i < M * K; ++i)
      xbuf[size_t(i)] = xc.dtype() == DType::BF16 ? bf16_to_f32(reinterpret_cast<const uint16_t*>(xc.raw())[i])
                                                  : bf16_to_f32(f32_to_bf16(xc.data<float>()[i]));
    xp = xbuf.data();
  }
  const Tensor wk = compute == DType::BF16 ? to_bf16(w) : w;  // bf16 compute on f32 W: rounded once
  const bool bf = wk.dtype() == DType::BF16;
  const bool avx512 = allow_avx512 && cpu_has_avx512();
  const detail::GemvBlockFn fn = avx512 ? detail::gemv_block_avx512 : detail::gemv_block_avx2;
  // bf16 W on an AVX512_BF16 CPU: vdpbf16ps on W as loaded, x as bf16 (the same values as xp).
  std::vector<uint16_t> xb16;
  const uint16_t* xb = nullptr;
  if (bf && avx512 && allow_dpbf16 && cpu_has_avx512_bf16()) {
    if (x.dtype() == DType::BF16) {
      xb = reinterpret_cast<const uint16_t*>(x.raw());
    } else {
      xb16.resize(size_t(M * K));
      for (int64_t i = 0; i < M * K; ++i) xb16[size_t(i)] = f32_to_bf16(xp[i]);
      xb = xb16.data();
    }
  }
  const int64_t row_bytes = K * (bf ? 2 : 4);
  const int64_t nt = num_threads();
  // Chunks of W rows, claimed in order by the team (dynamic: a descheduled thread's share is
  // picked up by the others): each a 1/(2 nt) share of the rows left, so the first are long (long
  // sequential streams) and the last short (the threads finish together), at least kChunkBytes,
  // in multiples of 8 rows. A W row's sum does not depend on its chunk (gemv.avx512.cpp).
  std::vector<int64_t> bounds{0};
  if (N * row_bytes > kInlineBytes && nt > 1) {
    const int64_t least = std::max<int64_t>(8, (kChunkBytes + row_bytes - 1) / row_bytes);
    while (bounds.back() < N) {
      const int64_t left = N - bounds.back();
      bounds.push_back(bounds.back() + std::min(left, (std::max(left / (2 * nt), least) + 7) / 8 * 8));
    }
  } else {
    bounds.push_back(N);
  }
  for (int64_t m0 = 0; m0 < M; m0 += kGemvMaxRows) {
    const int64_t mb = std::min(kGemvMaxRows, M - m0);
    team_parallel_for(int64_t(bounds.size()) - 1, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const int64_t n0 = bounds[size_t(c)], n1 = bounds[size_t(c + 1)];
        if (xb)
          detail::gemv_block_avx512_bf16dp(xb + m0 * K, mb, K, static_cast<const uint16_t*>(wk.raw()), n0, n1,
                                           yp + m0 * N, N, rp ? rp + m0 * N : nullptr);
        else
          fn(xp + m0 * K, mb, K, wk.raw(), bf, n0, n1, yp + m0 * N, N, rp ? rp + m0 * N : nullptr);
      }
    });
  }
}

namespace {

void forward_gemv(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor* r, Tensor& y, DType compute) {
  opcheck::host_context(ctx, "linear.gemv");
  linear_forward_gemv(x, w, r, y, compute);
}
void backward_gemv(const ExecContext& ctx, const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor* dw,
                   DType compute) {
  opcheck::host_context(ctx, "linear.gemv");
  linear_backward_with(ctx, kernel<GemmKernel>("cpu"), x, w, dy, dx, dw, compute);
}
const LinearKernel kLinearGemv{"gemv", forward_gemv, backward_gemv};

}  // namespace

TITAN_REGISTER_KERNEL(LinearKernel, "gemv", DeviceType::CPU, kLinearGemv);

}  // namespace titan
