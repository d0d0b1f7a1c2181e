// The decode thread team (core/team.h): every index exactly once for any split and thread count,
// after the workers have gone to sleep, nested inside a chunk, inside an OpenMP region, and from
// two callers at once.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/team.h"

namespace titan {
namespace {

// Runs team_parallel_for over [0, n) and checks that each index was visited exactly once and
// that every call saw a chunk of at most `grain` items starting on a multiple of it.
void expect_each_once(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(size_t(std::max<int64_t>(n, 1)));
  std::atomic<bool> aligned{true};
  team_parallel_for(n, grain, [&](int64_t b, int64_t e) {
    if (b % grain != 0 || e - b > grain || e <= b) aligned = false;
    for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
  });
  EXPECT_TRUE(aligned.load()) << "n=" << n << " grain=" << grain;
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[size_t(i)].load(), 1) << "index " << i << " of n=" << n;
}

TEST(Team, EveryIndexOnceForAnySplitAndThreadCount) {
  const int saved = num_threads();
  for (int t : {1, 2, 3, 5}) {
    set_num_threads(t);
    for (int64_t n : {0, 1, 7, 64, 1000, 100003})
      for (int64_t grain : {1, 3, 64, 5000}) expect_each_once(n, grain);
  }
  set_num_threads(saved);
}

TEST(Team, UsesTheWorkersAndWakesThemFromSleep) {
  const int saved = num_threads();
  set_num_threads(2);
  for (int round = 0; round < 3; ++round) {
    // Longer than the spin and yield stages: the worker is asleep on the futex by now.
    if (round > 0) std::this_thread::sleep_for(std::chrono::duration<double>(3 * kTeamYieldSeconds));
    std::atomic<int> others{0};
    const std::thread::id me = std::this_thread::get_id();
    // Chunks that wait a little so the worker, once woken, takes some of them.
    team_parallel_for(64, 1, [&](int64_t, int64_t) {
      if (std::this_thread::get_id() != me) others.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
    EXPECT_GT(others.load(), 0) << "round " << round << ": the worker took no chunk";
  }
  set_num_threads(saved);
}

TEST(Team, NestedCallsAndOpenMpRegionsRunInline) {
  const int saved = num_threads();
  set_num_threads(2);
  std::vector<std::atomic<int>> hits(100 * 50);
  team_parallel_for(100, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      team_parallel_for(50, 7, [&](int64_t b2, int64_t e2) {
        for (int64_t j = b2; j < e2; ++j) hits[size_t(i * 50 + j)].fetch_add(1);
      });
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  std::atomic<int64_t> sum{0};
#pragma omp parallel num_threads(2)
  {
    team_parallel_for(1000, 10, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
    });
  }
  EXPECT_EQ(sum.load(), 2 * (999 * 1000 / 2));
  set_num_threads(saved);
}

TEST(Team, TwoCallersAtOnce) {
  const int saved = num_threads();
  set_num_threads(2);
  std::atomic<int64_t> sums[2] = {0, 0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 2; ++c)
    callers.emplace_back([&, c] {
      for (int rep = 0; rep < 200; ++rep)
        team_parallel_for(1000, 16, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) sums[c].fetch_add(i);
        });
    });
  for (auto& t : callers) t.join();
  for (int c = 0; c < 2; ++c) EXPECT_EQ(sums[c].load(), 200 * (999 * 1000 / 2));
  set_num_threads(saved);
}

}  // namespace
}  // namespace titan
