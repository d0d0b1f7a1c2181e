// Attention forward and backward throughput, "reference" vs "cpu", in one run, on the attention
// shapes of the Qwen3 benchmark model (batch 4, seq 512, 8 query / 4 kv heads) at head_dim 64 and
// 128. GFLOP/s use the usual causal count: forward 4 B Hq D S(S+1)/2 (Q K^T and P V over the
// visible pairs), backward 2.5x that (five products, the score recompute included).
// The machine's f32 FMA peak is probed in the same run (every thread running independent
// AVX-512 FMA chains), so each figure is also a fraction of what the cores gave at that moment.
//
//   bench_attention [--threads N] [--repeats R] [--skip-reference] [--portable]
// --portable runs the cpu kernel on its portable tiles (what a CPU without AVX-512 gets).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <immintrin.h>

#include "core/rng.h"
#include "core/tensor.h"
#include "core/threading.h"
#include "ops/attention/attention.h"
#include "ops/attention/tiles.h"

using namespace titan;

namespace {

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  double fwd, bwd;  // best seconds
};

Timing time_kernel(const AttentionKernel& kern, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& dout, float scale, int repeats) {
  Tensor out, lse, dq, dk, dv;
  Timing best{1e30, 1e30};
  for (int r = 0; r < repeats; ++r) {
    double t0 = seconds();
    kern.forward(q, k, v, scale, out, lse);
    double t1 = seconds();
    kern.backward(q, k, v, out, lse, dout, scale, dq, dk, dv);
    double t2 = seconds();
    best.fwd = std::min(best.fwd, t1 - t0);
    best.bwd = std::min(best.bwd, t2 - t1);
  }
  return best;
}

// GFLOP/s of independent 512-bit FMA chains on all threads (24 accumulators per thread).
__attribute__((target("avx512f,fma"))) double fma_peak() {
  constexpr long kIters = 4000000;
  double t0 = seconds();
  float sink = 0;
#pragma omp parallel reduction(+ : sink)
  {
    __m512 acc[24];
    for (int i = 0; i < 24; ++i) acc[i] = _mm512_set1_ps(float(i));
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(0.001f);
    for (long k = 0; k < kIters; ++k) {
#pragma GCC unroll 24
      for (int i = 0; i < 24; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
    }
    alignas(64) float lanes[16];
    for (int i = 0; i < 24; ++i) {
      _mm512_store_ps(lanes, acc[i]);
      sink += lanes[i % 16];
    }
  }
  const double t = seconds() - t0;
  if (sink == 42.f) std::printf(" ");  // keeps the chains alive
  return 24.0 * 32 * kIters * num_threads() / t * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 5;
  bool reference = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--skip-reference")) reference = false;
    else if (!std::strcmp(argv[i], "--portable")) attention::prefer_portable_tiles(true);
    else {
      std::fprintf(stderr, "usage: %s [--threads N] [--repeats R] [--skip-reference] [--portable]\n", argv[0]);
      return 2;
    }
  }
  set_num_threads(threads);
  const int64_t B = 4, S = 512, Hq = 8, Hkv = 4;
  const bool avx512 = __builtin_cpu_supports("avx512f");
  std::printf("attention B=%lld S=%lld Hq=%lld Hkv=%lld, %d threads, cpu tiles: %s\n", (long long)B, (long long)S,
              (long long)Hq, (long long)Hkv, threads, attention::tile_ops().name);
  std::printf("%-10s %4s %9s %12s %7s %9s %12s %7s %13s\n", "variant", "D", "fwd ms", "fwd GFLOP/s", "%peak", "bwd ms",
              "bwd GFLOP/s", "%peak", "peak GFLOP/s");
  for (int64_t D : {64, 128}) {
    Tensor q = Tensor::empty({B, S, Hq, D}, DType::F32), k = Tensor::empty({B, S, Hkv, D}, DType::F32);
    Tensor v = Tensor::empty({B, S, Hkv, D}, DType::F32), dout = Tensor::empty({B, S, Hq, D}, DType::F32);
    fill_normal(q, 0, 1, Philox{1, 1});
    fill_normal(k, 0, 1, Philox{1, 2});
    fill_normal(v, 0, 1, Philox{1, 3});
    fill_normal(dout, 0, 1, Philox{1, 4});
    const float scale = 1.f / std::sqrt(float(D));
    const double fwd_flops = 4.0 * double(B * Hq * D) * double(S) * double(S + 1) / 2;
    for (const char* variant : {"reference", "cpu"}) {
      const bool is_ref = !std::strcmp(variant, "reference");
      if (is_ref && !reference) continue;
      const Timing t = time_kernel(kernel<AttentionKernel>(variant), q, k, v, dout, scale, is_ref ? 1 : repeats + 1);
      const double peak = avx512 ? fma_peak() : 0;  // probed right after, under the same load
      const double gf = fwd_flops / t.fwd * 1e-9, gb = 2.5 * fwd_flops / t.bwd * 1e-9;
      std::printf("%-10s %4lld %9.2f %12.1f %6.1f%% %9.2f %12.1f %6.1f%% %13.1f\n", variant, (long long)D,
                  t.fwd * 1e3, gf, peak > 0 ? 100 * gf / peak : 0.0, t.bwd * 1e3, gb,
                  peak > 0 ? 100 * gb / peak : 0.0, peak);
    }
  }
  return 0;
}
