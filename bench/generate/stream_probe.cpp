// Memory-bandwidth probe for the decode bound, on N threads over 256 MiB arrays, best of several
// repetitions: STREAM-style copy (b[i] = a[i], bytes counted as read + written) and read (a sum
// over every 64-bit word of a, bytes read). Prints "COPY READ" in GB/s.
// usage: stream_probe [threads]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {
template <class F>
double best_of(int threads, double bytes, F&& part) {
  double best = 0;
  for (int rep = 0; rep < 8; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { part(t); });
    for (auto& th : pool) th.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, bytes / s / 1e9);
  }
  return best;
}
}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const size_t n = size_t(64) << 20;  // floats per array (256 MiB)
  std::vector<float> a(n, 1.f), b(n, 0.f);
  const auto lo = [&](int t) { return n * size_t(t) / size_t(threads); };
  const double copy = best_of(threads, 2.0 * double(n) * sizeof(float), [&](int t) {
    std::memcpy(b.data() + lo(t), a.data() + lo(t), (lo(t + 1) - lo(t)) * sizeof(float));
  });
  std::vector<uint64_t> sums(static_cast<size_t>(threads), 0);
  const double read = best_of(threads, double(n) * sizeof(float), [&](int t) {
    const uint64_t* w = reinterpret_cast<const uint64_t*>(a.data() + lo(t));
    const size_t words = (lo(t + 1) - lo(t)) / 2;
    uint64_t s = 0;
    for (size_t i = 0; i < words; ++i) s += w[i];  // vectorised: integer sums need no reassociation licence
    sums[size_t(t)] += s;
  });
  volatile uint64_t sink = sums[0];  // keeps the sums observable
  (void)sink;
  std::printf("%.3f %.3f\n", copy, read);
  return 0;
}
