// The decode GEMV's own bandwidth (ops/matmul/gemv.h, AVX-512 body) next to a copy and a read of
// the same size, all timed in CPU time of the calling thread (one thread), so that a busy machine
// slows the rates less than wall-clock timing would: W [65536, 1024] (256 MB f32, 128 MB bf16),
// m = 1..4 rows, best of 5. Prints GB/s of weights read.
//   g++ -O3 -std=c++20 -march=native -Isrc bench/generate/gemv_probe.cpp src/ops/matmul/gemv.avx512.cpp \
//       -o /tmp/gemv_probe && /tmp/gemv_probe        (needs an AVX-512 CPU)
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <vector>

#include "ops/matmul/gemv.h"

namespace {
double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}
}  // namespace

int main() {
  const int64_t K = 1024, N = 65536;
  std::vector<float> wf(size_t(N * K), 0.01f), copy(size_t(N * K));
  std::vector<uint16_t> wb(size_t(N * K), 0x3c00);
  std::vector<float> x(size_t(4 * K), 1.f), y(size_t(4 * N));
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
  std::printf("copy %.2f GB/s (read + written), read %.2f GB/s  [%g]\n", best_copy, best_read, double(sink + copy[7]));
  // bf = 2: bf16 W on vdpbf16ps (x as bf16), next to bf = 1, the shift-widening form; the three
  // forms interleaved per repetition, so load that comes and goes hits them alike.
  std::vector<uint16_t> xb(size_t(4 * K), 0x3f80);
  for (int m = 1; m <= 4; ++m) {
    double best[3] = {0, 0, 0};
    for (int rep = 0; rep < 5; ++rep)
      for (int bf = 0; bf < 3; ++bf) {
        const double t0 = cpu_now();
        if (bf == 2)
          titan::detail::gemv_block_avx512_bf16dp(xb.data(), m, K, wb.data(), 0, N, y.data(), N, nullptr);
        else
          titan::detail::gemv_block_avx512(x.data(), m, K, bf ? static_cast<const void*>(wb.data()) : wf.data(), bf,
                                           0, N, y.data(), N, nullptr);
        best[bf] = std::max(best[bf], double(N * K) * (bf ? 2 : 4) / (cpu_now() - t0) / 1e9);
      }
    std::printf("gemv m=%d f32 %.2f, bf16 widened %.2f, bf16 vdpbf16ps %.2f GB/s of weights\n", m, best[0], best[1],
                best[2]);
  }
}
