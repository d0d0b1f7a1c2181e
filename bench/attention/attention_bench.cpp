// Attention forward and backward throughput, "reference" vs "cpu", in one run, on the attention
// shapes of the Qwen3 benchmark model (batch 4, seq 512, 8 query / 4 kv heads) at head_dim 64 and
// 128. GFLOP/s use the usual causal count: forward 4 B Hq D S(S+1)/2 (Q K^T and P V over the
// visible pairs), backward 2.5x that (five products, the score recompute included).
//
// Two clocks: wall time (what a step sees) and process CPU time summed over threads. %peak divides
// the CPU-time rate by the CPU-time rate of an f32 FMA probe run in the same process (24
// independent AVX-512 FMA chains per thread): on a machine shared with other work, CPU time only
// counts the slices this process got, so that ratio stays meaningful when wall-clock rates do not.
// Every figure is the best of the repeats (the probe too).
//
//   bench_attention [--threads N] [--repeats R] [--skip-reference] [--portable]
// --portable runs the cpu kernel on its portable tiles (what a CPU without AVX-512 gets).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "core/rng.h"
#include "core/tensor.h"
#include "core/threading.h"
#include "ops/attention/attention.h"
#include "ops/attention/tiles.h"

using namespace titan;

namespace {

struct Clock {
  double wall, cpu;
  static Clock now() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return {std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(),
            double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec)};
  }
};

struct Span {
  double wall = 1e30, cpu = 1e30;  // best seconds
  void keep(const Clock& a, const Clock& b) {
    wall = std::min(wall, b.wall - a.wall);
    cpu = std::min(cpu, b.cpu - a.cpu);
  }
};

void time_kernel(const AttentionKernel& kern, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                 float scale, int repeats, Span& fwd, Span& bwd) {
  Tensor out, lse, dq, dk, dv;
  for (int r = 0; r < repeats; ++r) {
    const Clock t0 = Clock::now();
    kern.forward(ExecContext::host(), q, k, v, scale, out, lse);
    const Clock t1 = Clock::now();
    kern.backward(ExecContext::host(), q, k, v, out, lse, dout, scale, dq, dk, dv);
    const Clock t2 = Clock::now();
    fwd.keep(t0, t1);
    bwd.keep(t1, t2);
  }
}

// Independent 512-bit FMA chains on all threads (24 accumulators per thread); returns the flops.
__attribute__((target("avx512f,fma"))) double fma_probe() {
  constexpr long kIters = 1000000;
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
  if (sink == 42.f) std::printf(" ");  // keeps the chains alive
  return 24.0 * 32 * kIters * num_threads();
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
  double probe_per_cpu_s = 0, probe_wall = 0;  // GFLOP per CPU second, GFLOP/s of wall time
  for (int r = 0; avx512 && r < 3 * repeats; ++r) {
    const Clock a = Clock::now();
    const double flops = fma_probe();
    const Clock b = Clock::now();
    probe_per_cpu_s = std::max(probe_per_cpu_s, flops / (b.cpu - a.cpu) * threads * 1e-9);
    probe_wall = std::max(probe_wall, flops / (b.wall - a.wall) * 1e-9);
  }
  std::printf("attention B=%lld S=%lld Hq=%lld Hkv=%lld, %d threads, cpu tiles: %s\n", (long long)B, (long long)S,
              (long long)Hq, (long long)Hkv, threads, attention::tile_ops().name);
  if (avx512)
    std::printf("f32 FMA probe: %.1f GFLOP/s wall, %.1f GFLOP/s per %d CPU-seconds of this process\n", probe_wall,
                probe_per_cpu_s, threads);
  std::printf("%-10s %4s %9s %12s %7s %9s %12s %7s\n", "variant", "D", "fwd ms", "fwd GFLOP/s", "%peak", "bwd ms",
              "bwd GFLOP/s", "%peak");
  for (int64_t D : {64, 128}) {
    Tensor q = Tensor::empty({B, S, Hq, D}, DType::F32), k = Tensor::empty({B, S, Hkv, D}, DType::F32);
    Tensor v = Tensor::empty({B, S, Hkv, D}, DType::F32), dout = Tensor::empty({B, S, Hq, D}, DType::F32);
    fill_normal(q, 0, 1, Philox{1, 1});
    fill_normal(k, 0, 1, Philox{1, 2});
    fill_normal(v, 0, 1, Philox{1, 3});
    fill_normal(dout, 0, 1, Philox{1, 4});
    const float scale = 1.f / std::sqrt(float(D));
    const double fwd_flops = 4.0 * double(B * Hq * D) * double(S) * double(S + 1) / 2, bwd_flops = 2.5 * fwd_flops;
    for (const char* variant : {"reference", "cpu"}) {
      const bool is_ref = !std::strcmp(variant, "reference");
      if (is_ref && !reference) continue;
      Span fwd, bwd;
      time_kernel(kernel<AttentionKernel>(variant), q, k, v, dout, scale, is_ref ? 1 : repeats + 1, fwd, bwd);
      // CPU-time rate as if all `threads` cores were this process's, over the probe's.
      auto pct = [&](double flops, const Span& s) {
        return probe_per_cpu_s > 0 ? 100 * flops / s.cpu * threads * 1e-9 / probe_per_cpu_s : 0.0;
      };
      std::printf("%-10s %4lld %9.2f %12.1f %6.1f%% %9.2f %12.1f %6.1f%%\n", variant, (long long)D, fwd.wall * 1e3,
                  fwd_flops / fwd.wall * 1e-9, pct(fwd_flops, fwd), bwd.wall * 1e3, bwd_flops / bwd.wall * 1e-9,
                  pct(bwd_flops, bwd));
    }
  }
  return 0;
}
