// Memory-bandwidth probe for the decode bound, on N threads over 512 MiB arrays (beyond the last
// level cache of the machines seen: up to 480 MiB reported), best of several repetitions:
// STREAM-style copy (b[i] = a[i], bytes counted as read + written) and read (a sum over every
// 64-bit word of a, bytes read). The read is the best over 1, 2, 4 and 8 sequential streams per
// thread (a thread's part cut into that many pieces summed in lockstep, one 64-byte line of each
// at a time): one stream per thread leaves the memory system idle part of the time (19-24 GB/s on
// 2 threads of the AVX512_BF16 Xeon against 28-31 with four), and the decode GEMV reads four, so
// the bound is the rate reachable with any number. The read also runs on a copy of the array
// advised to transparent huge pages (madvise): 33-34 GB/s on the Xeon where 4 KiB pages give
// 30-32, so the bound counts them too although titan's weights sit on 4 KiB pages (huge pages for
// them gave bf16 decode +6% but cost the first prefill 30% on this VM: bench/llamacpp/RESULTS.md).
// Prints "COPY READ" in GB/s, READ the best of all; the rate of each form goes to stderr.
// usage: stream_probe [threads]
#include <sys/mman.h>

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

// The sum of every 64-bit word of w[0, words) read as S pieces in lockstep (words a multiple of
// 8 * S: whole lines).
template <int S>
uint64_t sum_streams(const uint64_t* w, size_t words) {
  const size_t piece = words / S;
  uint64_t acc[S][8] = {};
  for (size_t i = 0; i < piece; i += 8)
    for (int s = 0; s < S; ++s)
      for (int u = 0; u < 8; ++u) acc[s][u] += w[size_t(s) * piece + i + size_t(u)];  // one line: vectorised
  uint64_t total = 0;
  for (int s = 0; s < S; ++s)
    for (int u = 0; u < 8; ++u) total += acc[s][u];
  return total;
}
}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const size_t n = size_t(128) << 20;  // floats per array (512 MiB)
  std::vector<float> a(n, 1.f), b(n, 0.f);
  const auto lo = [&](int t) { return n * size_t(t) / size_t(threads) / 128 * 128; };  // whole lines of 8 streams
  const auto hi = [&](int t) { return t + 1 == threads ? n : lo(t + 1); };
  const double copy = best_of(threads, 2.0 * double(n) * sizeof(float), [&](int t) {
    std::memcpy(b.data() + lo(t), a.data() + lo(t), (hi(t) - lo(t)) * sizeof(float));
  });
  // The huge-page copy: 2 MiB aligned, advised before it is first written.
  float* h = nullptr;
  if (posix_memalign(reinterpret_cast<void**>(&h), size_t(2) << 20, n * sizeof(float)) != 0) return 1;
#ifdef MADV_HUGEPAGE
  madvise(h, n * sizeof(float), MADV_HUGEPAGE);
#endif
  std::fill_n(h, n, 1.f);
  std::vector<uint64_t> sums(static_cast<size_t>(threads), 0);
  double read = 0;
  auto probe = [&](const float* src, const char* pages, int streams, auto fn) {
    const double r = best_of(threads, double(n) * sizeof(float), [&](int t) {
      const size_t words = (hi(t) - lo(t)) / 2 / (8 * size_t(streams)) * (8 * size_t(streams));
      sums[size_t(t)] += fn(reinterpret_cast<const uint64_t*>(src + lo(t)), words);
    });
    std::fprintf(stderr, "read, %s pages, %d stream%s per thread: %.3f GB/s\n", pages, streams,
                 streams > 1 ? "s" : "", r);
    read = std::max(read, r);
  };
  for (const auto& [src, pages] : {std::pair<const float*, const char*>{a.data(), "4 KiB"}, {h, "huge"}}) {
    probe(src, pages, 1, sum_streams<1>);
    probe(src, pages, 2, sum_streams<2>);
    probe(src, pages, 4, sum_streams<4>);
    probe(src, pages, 8, sum_streams<8>);
  }
  std::free(h);
  volatile uint64_t sink = sums[0];  // keeps the sums observable
  (void)sink;
  std::printf("%.3f %.3f\n", copy, read);
  return 0;
}
