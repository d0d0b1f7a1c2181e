// The collective watchdog (distributed/watchdog.h): its decisions on a scripted clock, its thread on the
// real one, Comm::set_timeout, and (only when TITAN_TEST_HANG=1, under mpirun: the hung-rank case
// of tests/cli/dist_faults.sh) a real job whose rank 1 stops itself while rank 0 waits.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "core/error.h"
#include "comm/comm.h"
#include "distributed/backends.h"
#include "distributed/watchdog.h"

using namespace titan;
using namespace titan::distributed;
using namespace titan::comm;
using namespace titan::test;

namespace {

const std::vector<std::string> kOps = {"MPI_Allgather", "MPI_Alltoall"};

// A watchdog without a thread whose expire action records the line.
struct Scripted {
  std::vector<std::string> lines;
  CollectiveWatchdog w{"rank 1 of 4", kOps,
                       CollectiveWatchdog::Options{1.0, nullptr, [this](const std::string& l) { lines.push_back(l); }, false}};
};

}  // namespace

TEST(Watchdog, ACallWaitingPastTheTimeoutEndsTheJobWithOneLine) {
  Scripted s;
  s.w.set_timeout(5, "[comm] train_timeout_seconds");
  s.w.begin(1);
  EXPECT_FALSE(s.w.poll(100.0));  // first seen: its wait counts from here
  EXPECT_FALSE(s.w.poll(104.9));
  EXPECT_TRUE(s.lines.empty());
  EXPECT_TRUE(s.w.poll(105.0));
  ASSERT_EQ(s.lines.size(), 1u);
  EXPECT_EQ(s.lines[0],
            "titan: error (rank 1 of 4): MPI_Alltoall has not completed after 5.0 s ([comm] train_timeout_seconds = 5); "
            "another rank is hung or unreachable — ending the job");
  EXPECT_FALSE(s.w.poll(200.0));  // the action runs once
  EXPECT_EQ(s.lines.size(), 1u);
}

TEST(Watchdog, CallsThatCompleteNeverExpire) {
  Scripted s;
  s.w.set_timeout(2);
  double t = 0;
  // Many calls, each shorter than a period, polls far apart: every look sees another call.
  for (int i = 0; i < 50; ++i) {
    s.w.begin(unsigned(i % 2));
    EXPECT_FALSE(s.w.poll(t += 10));
    s.w.end();
    EXPECT_FALSE(s.w.poll(t += 10));
  }
  // Back-to-back calls of the same operation are told apart by their sequence number.
  s.w.begin(0);
  EXPECT_FALSE(s.w.poll(t += 1));
  s.w.end();
  s.w.begin(0);
  EXPECT_FALSE(s.w.poll(t += 1.9));
  EXPECT_FALSE(s.w.poll(t += 1.9));  // 1.9 s since this call was first seen
  EXPECT_TRUE(s.w.poll(t += 0.1));
  ASSERT_EQ(s.lines.size(), 1u);
  EXPECT_EQ(s.lines[0],
            "titan: error (rank 1 of 4): MPI_Allgather has not completed after 2.0 s (timeout 2 s); "
            "another rank is hung or unreachable — ending the job");
}

TEST(Watchdog, ZeroMeansNoTimeoutAndTheTimeoutCanChange) {
  Scripted s;
  s.w.begin(0);
  EXPECT_FALSE(s.w.poll(0));
  EXPECT_FALSE(s.w.poll(1e6));  // no timeout set yet
  s.w.set_timeout(300, "[comm] init_timeout_seconds");
  EXPECT_EQ(s.w.timeout(), 300);
  s.w.end();
  s.w.begin(0);
  EXPECT_FALSE(s.w.poll(2e6));
  EXPECT_FALSE(s.w.poll(2e6 + 200));
  s.w.set_timeout(100, "[comm] train_timeout_seconds");  // after the first step: tighter
  EXPECT_TRUE(s.w.poll(2e6 + 200));
  ASSERT_EQ(s.lines.size(), 1u);
  EXPECT_NE(s.lines[0].find("after 200.0 s ([comm] train_timeout_seconds = 100)"), std::string::npos) << s.lines[0];
  EXPECT_EQ(error_of([&] { s.w.set_timeout(-1, "[comm] train_timeout_seconds"); }),
            "[comm] train_timeout_seconds must be >= 0 seconds (0 = no timeout), got -1");
}

TEST(Watchdog, ThreadFiresOnTheRealClockAndStaysQuietOtherwise) {
  std::promise<std::string> fired;
  auto got = fired.get_future();
  CollectiveWatchdog w("rank 0 of 2", kOps,
                       CollectiveWatchdog::Options{0.02, nullptr, [&](const std::string& l) { fired.set_value(l); }, true});
  w.set_timeout(0.5, "t");
  for (int i = 0; i < 40; ++i) {  // 0.8 s of short calls: no alarm
    w.begin(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    w.end();
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
  }
  EXPECT_EQ(got.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  const auto t0 = std::chrono::steady_clock::now();
  w.begin(1);  // and never end: a peer that does not answer
  ASSERT_EQ(got.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(took, 0.5);
  EXPECT_LT(took, 5.0);
  EXPECT_NE(got.get().find("MPI_Alltoall has not completed after 0.5 s (t = 0.5)"), std::string::npos);
  w.end();
}

TEST(Watchdog, CommSetTimeoutValidatesAndScopesRestore) {
  LocalComm c;
  EXPECT_EQ(c.timeout(), 0);
  c.set_timeout(3, "[comm] init_timeout_seconds");
  EXPECT_EQ(c.timeout(), 3);
  EXPECT_EQ(error_of([&] { c.set_timeout(-2, "[comm] init_timeout_seconds"); }),
            "[comm] init_timeout_seconds must be >= 0 seconds (0 = no timeout), got -2");
  EXPECT_NE(error_of([&] { c.set_timeout(std::nan(""), ""); }).find("collective timeout must be >= 0 seconds"),
            std::string::npos);
  EXPECT_EQ(c.timeout(), 3);
  {
    ScopedTimeout none(c, 0);
    EXPECT_EQ(c.timeout(), 0);
    EXPECT_EQ(c.timeout_setting(), "");
  }
  EXPECT_EQ(c.timeout(), 3);
  EXPECT_EQ(c.timeout_setting(), "[comm] init_timeout_seconds");
}

// Run by tests/cli/dist_faults.sh: TITAN_TEST_HANG=1 mpirun -np 2 test_distributed --gtest_filter=...
// Rank 1 stops itself (SIGSTOP: alive, never answering); rank 0 waits in a barrier with a 3 s
// timeout. The watchdog must end rank 0 with its message; mpirun then ends rank 1 (it sends
// SIGCONT before SIGTERM, so rank 1 keeps hanging after it resumes).
TEST(WatchdogJob, HungRankEndsTheJob) {
  const char* on = std::getenv("TITAN_TEST_HANG");
  if (!on || std::string(on) != "1") GTEST_SKIP() << "set TITAN_TEST_HANG=1 and run under mpirun -np 2";
  std::unique_ptr<Comm> comm = make_comm();
  ASSERT_GE(comm->size(), 2) << "needs mpirun -np 2 (or more)";
  comm->set_timeout(3, "[comm] train_timeout_seconds");
  comm->barrier();  // every rank is up
  if (comm->rank() == 1) {
    std::raise(SIGSTOP);
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));  // resumed (mpirun's SIGCONT): still hung
  }
  comm->barrier();
  FAIL() << "rank " << comm->rank() << " passed a barrier that rank 1 never entered";
}
