// Memory-bandwidth probe for the decode bound: STREAM-style copy (b[i] = a[i]) over two 256 MiB
// arrays on N threads, best of several repetitions, bytes counted as read + written. Prints GB/s.
// usage: stream_probe [threads]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const size_t n = size_t(64) << 20;  // floats per array (256 MiB)
  std::vector<float> a(n, 1.f), b(n, 0.f);
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const size_t lo = n * size_t(t) / size_t(threads), hi = n * size_t(t + 1) / size_t(threads);
        std::memcpy(b.data() + lo, a.data() + lo, (hi - lo) * sizeof(float));
      });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * double(n) * sizeof(float) / s / 1e9);
    a[size_t(rep)] = b[size_t(rep) + 1];  // keep the copies observable
  }
  std::printf("%.3f\n", best);
  return 0;
}
