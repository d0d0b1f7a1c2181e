// Thread pool front: OpenMP underneath (oneDNN in this build uses the same OpenMP runtime, so the
// two never oversubscribe the cores). Results never depend on the thread count: work is split in
// fixed-size chunks and every reduction is ordered by chunk.
#pragma once
#include <cstdint>

namespace titan {

int num_threads();
// n <= 0: all hardware threads; n above max_num_threads() is an error (nothing changes).
void set_num_threads(int n);
// The most threads set_num_threads accepts: 8 per hardware thread, at least 1024.
int max_num_threads();

// Calls fn(begin, end) over [0, n) in chunks of at least `grain` items, in parallel.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t chunks = (n + grain - 1) / grain;
  if (chunks == 1) {
    fn(int64_t(0), n);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t c = 0; c < chunks; ++c) {
    int64_t b = c * grain, e = b + grain < n ? b + grain : n;
    fn(b, e);
  }
}

}  // namespace titan
