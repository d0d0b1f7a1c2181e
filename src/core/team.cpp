// The decode thread team (team.h). One 64-bit word carries a region's whole claim state:
// generation (24 bits) | chunk count (20) | next chunk (20). A worker claims chunk `next` by a
// compare-exchange on that word, so a worker that wakes late can never claim a chunk of a region
// whose count it did not read in the same word; the caller publishes fn/ctx before the word and
// waits until every chunk of the region has completed before it publishes the next one.
#include "core/team.h"

#include <immintrin.h>
#include <omp.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace titan {
namespace detail {
namespace {

constexpr int kIndexBits = 20;
constexpr uint64_t kIndexMask = (uint64_t(1) << kIndexBits) - 1;

thread_local bool tl_in_team = false;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Waits (spin, then yield, then sleep) until `done()`; `word` is the atomic a sleeper waits on,
// `seen` its value when the wait began, `sleepers` counts who sleeps so the waker can skip the
// futex call when nobody does. word == nullptr: never sleeps (the caller waiting for its chunks).
template <class Done>
void staged_wait(Done done, std::atomic<uint32_t>* word, uint32_t seen, std::atomic<int>* sleepers) {
  const double t0 = now_seconds();
  double waited = 0;  // read from the clock every 64 turns
  for (uint32_t turn = 0; !done(); ++turn) {
    if ((turn & 63) == 63) waited = now_seconds() - t0;
    if (waited < kTeamSpinSeconds) {
      _mm_pause();
    } else if (word == nullptr || waited < kTeamYieldSeconds) {
      sched_yield();
    } else {
      sleepers->fetch_add(1, std::memory_order_seq_cst);
      if (!done() && word->load(std::memory_order_seq_cst) == seen) word->wait(seen, std::memory_order_seq_cst);
      sleepers->fetch_sub(1, std::memory_order_seq_cst);
    }
  }
}

class Team {
 public:
  explicit Team(int workers) {
    threads_.reserve(size_t(workers));
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker_main(); });
  }
  ~Team() {
    stop_.store(true, std::memory_order_seq_cst);
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    epoch_.notify_all();
    for (auto& t : threads_) t.join();
  }
  int workers() const { return int(threads_.size()); }

  void run(int64_t chunks, TeamChunkFn fn, void* ctx) {
    fn_ = fn;
    ctx_ = ctx;
    done_.store(0, std::memory_order_relaxed);
    gen_ = (gen_ + 1) & 0xFFFFFF;
    state_.store(gen_ << (2 * kIndexBits) | uint64_t(chunks) << kIndexBits, std::memory_order_release);
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) epoch_.notify_all();
    work();
    staged_wait([&] { return done_.load(std::memory_order_acquire) == chunks; }, nullptr, 0, nullptr);
  }

 private:
  void work() {
    uint64_t s = state_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t chunks = (s >> kIndexBits) & kIndexMask, idx = s & kIndexMask;
      if (idx >= chunks) return;
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel, std::memory_order_acquire)) {
        fn_(ctx_, int64_t(idx));
        done_.fetch_add(1, std::memory_order_release);
        s = state_.load(std::memory_order_acquire);
      }
    }
  }

  void worker_main() {
    tl_in_team = true;
    uint32_t seen = 0;  // the epoch at construction: a region published before this thread ran is still new
    for (;;) {
      staged_wait(
          [&] { return epoch_.load(std::memory_order_acquire) != seen || stop_.load(std::memory_order_relaxed); },
          &epoch_, seen, &sleepers_);
      if (stop_.load(std::memory_order_acquire)) return;
      seen = epoch_.load(std::memory_order_acquire);
      work();
    }
  }

  std::atomic<uint64_t> state_{0};
  std::atomic<uint32_t> epoch_{0};
  std::atomic<int64_t> done_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  TeamChunkFn fn_ = nullptr;
  void* ctx_ = nullptr;
  uint64_t gen_ = 0;
  std::vector<std::thread> threads_;
};

std::mutex g_team_mutex;        // held by the one caller using the team
std::unique_ptr<Team> g_team;  // rebuilt when num_threads() changes

}  // namespace

bool in_team() { return tl_in_team; }

bool team_run(int64_t chunks, TeamChunkFn fn, void* ctx) {
  const int want = num_threads() - 1;
  if (want < 1 || tl_in_team || omp_in_parallel() || uint64_t(chunks) > kIndexMask) return false;
  std::unique_lock<std::mutex> lock(g_team_mutex, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  if (!g_team || g_team->workers() != want) {
    g_team.reset();
    g_team = std::make_unique<Team>(want);
  }
  tl_in_team = true;  // a chunk that calls team_parallel_for runs it inline
  g_team->run(chunks, fn, ctx);
  tl_in_team = false;
  return true;
}

}  // namespace detail
}  // namespace titan
