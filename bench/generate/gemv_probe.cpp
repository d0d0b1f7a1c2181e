// The decode GEMV's own bandwidth (ops/matmul/gemv.h): W [262144, 1024] (1 GiB f32, 512 MiB
// bf16: beyond the last level cache of the machines seen, up to 480 MiB), m = 1..4 rows, best of
// 5, in GB/s of weights read, for each body this CPU runs: AVX2 (f32, bf16 widened) always, and
// AVX-512 (f32, bf16 widened, bf16 on vdpbf16ps) when built with AVX-512 (-march=native on such a
// CPU). With one thread (the default) timed in the thread's CPU time, so that a busy machine slows
// the rates less than wall-clock timing would, next to a copy and a one-stream read of the same
// size; with N threads each takes a contiguous 1/N of the W rows (as the decode team's split does)
// and the time is wall clock.
// Build and run, with [threads] optional (drop the .avx512.cpp on a CPU without AVX-512):
//   g++ -O3 -std=c++20 -march=native -pthread -Isrc bench/generate/gemv_probe.cpp src/ops/matmul/gemv.avx2.cpp
//   src/ops/matmul/gemv.avx512.cpp -o /tmp/gemv_probe && /tmp/gemv_probe [threads]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

#include "ops/matmul/gemv.h"

namespace {
double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}
double wall_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 1;
  const int64_t K = 1024, N = 262144;
  std::vector<float> wf(size_t(N * K), 0.01f);
  std::vector<uint16_t> wb(size_t(N * K), 0x3c00);
  std::vector<float> x(size_t(4 * K), 1.f), y(size_t(4 * N));
  if (threads == 1) {
    std::vector<float> copy(size_t(N * K));
    double best_copy = 0, best_read = 0;
    float sink = 0;
    for (int rep = 0; rep < 5; ++rep) {
      double t0 = cpu_now();
      std::memcpy(copy.data(), wf.data(), wf.size() * sizeof(float));
      double s = cpu_now() - t0;
      best_copy = std::max(best_copy, 2.0 * double(wf.size()) * 4 / s / 1e9);
      t0 = cpu_now();
      for (size_t i = 0; i < wf.size(); i += 16) sink += wf[i];  // one load per 64-byte line
      s = cpu_now() - t0;
      best_read = std::max(best_read, double(wf.size()) * 4 / s / 1e9);
    }
    std::printf("copy %.2f GB/s (read + written), read %.2f GB/s  [%g]\n", best_copy, best_read,
                double(sink + copy[7]));
  }
  // The forms: 0 AVX2 f32, 1 AVX2 bf16 widened, then with AVX-512 2 f32, 3 bf16 widened, 4 bf16
  // on vdpbf16ps (x as bf16).
  const char* names[] = {"avx2 f32", "avx2 bf16", "avx512 f32", "avx512 bf16", "avx512 bf16dp"};
#ifdef __AVX512F__
  const int forms = 5;
#else
  const int forms = 2;
#endif
  std::vector<uint16_t> xb(size_t(4 * K), 0x3f80);
  // One product over all of W: thread t takes rows [N t / T, N (t + 1) / T).
  const auto product = [&](int f, int m, int64_t n0, int64_t n1) {
    const bool bf = f == 1 || f == 3;
    const void* w = bf ? static_cast<const void*>(wb.data()) : wf.data();
    if (f < 2)
      titan::detail::gemv_block_avx2(x.data(), m, K, w, bf, n0, n1, y.data(), N, nullptr);
#ifdef __AVX512F__
    else if (f == 4)
      titan::detail::gemv_block_avx512_bf16dp(xb.data(), m, K, wb.data(), n0, n1, y.data(), N, nullptr);
    else
      titan::detail::gemv_block_avx512(x.data(), m, K, w, bf, n0, n1, y.data(), N, nullptr);
#endif
  };
  // The forms interleaved per repetition, so load that comes and goes hits them alike.
  for (int m = 1; m <= 4; ++m) {
    double best[5] = {0, 0, 0, 0, 0};
    for (int rep = 0; rep < 5; ++rep)
      for (int f = 0; f < forms; ++f) {
        double s = 0;
        if (threads == 1) {
          const double t0 = cpu_now();
          product(f, m, 0, N);
          s = cpu_now() - t0;
        } else {
          const double t0 = wall_now();
          std::vector<std::thread> pool;
          for (int t = 0; t < threads; ++t)
            pool.emplace_back([&, t] { product(f, m, N * t / threads, N * (t + 1) / threads); });
          for (auto& th : pool) th.join();
          s = wall_now() - t0;
        }
        const bool bf = f == 1 || f >= 3;
        best[f] = std::max(best[f], double(N * K) * (bf ? 2 : 4) / s / 1e9);
      }
    std::printf("gemv m=%d", m);
    for (int f = 0; f < forms; ++f) std::printf("%s %s %.2f", f ? "," : "", names[f], best[f]);
    std::printf(" GB/s of weights (%d thread%s)\n", threads, threads > 1 ? "s" : "");
  }
}
