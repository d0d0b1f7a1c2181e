// The threaded backend (N ranks as N threads): the primitive cases of comm_cases.h for 1-4 ranks,
// rank-order reductions, and a failing rank releasing the others.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "comm/thread_comm.h"
#include "core/error.h"
#include "unit/comm/comm_cases.h"

using namespace titan;
using namespace titan::comm;

namespace {

void for_worlds(void (*fn)(Comm&)) {
  for (int n = 1; n <= 4; ++n) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    run_threaded_ranks(n, [&](Comm& c) { fn(c); }, 120);
  }
}

}  // namespace

TEST(ThreadComm, AllToAllV) { for_worlds(test::case_all_to_all_v); }
TEST(ThreadComm, SendRecvRing) { for_worlds(test::case_send_recv_ring); }
TEST(ThreadComm, AsyncWorkRunsInOrder) { for_worlds(test::case_async_in_order); }
TEST(ThreadComm, SplitByParity) { for_worlds(test::case_split_by_parity); }

TEST(ThreadComm, ReduceScatterIsTheRankOrderSum) {
  run_threaded_ranks(3, [](Comm& c) {
    const int n = c.size(), r = c.rank();
    const int64_t chunk = 257;
    auto val = [](int q, int64_t i) { return (q % 2 ? 1e-3f : 1.0f) * float(1 + (i * 7 + q * 13) % 97) / 3.0f; };
    std::vector<float> in(size_t(n * chunk)), out(static_cast<size_t>(chunk));
    for (int64_t i = 0; i < n * chunk; ++i) in[size_t(i)] = val(r, i);
    c.reduce_scatter(in.data(), out.data(), chunk, ReduceOp::Sum);
    for (int64_t i = 0; i < chunk; ++i) {
      float want = val(0, r * chunk + i);
      for (int q = 1; q < n; ++q) want += val(q, r * chunk + i);
      ASSERT_EQ(out[size_t(i)], want);
    }
    EXPECT_EQ(std::string(c.backend()), "threads");
  });
}

TEST(ThreadComm, AFailingRankReleasesTheOthers) {
  std::atomic<int> released{0};
  try {
    run_threaded_ranks(3, [&](Comm& c) {
      if (c.rank() == 1) fail("rank 1 broke");
      try {
        c.barrier();
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("another rank failed during barrier"), std::string::npos) << e.what();
        ++released;
        throw;
      }
    });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 broke"), std::string::npos) << "the first failure is rethrown: "
                                                                             << e.what();
  }
  EXPECT_EQ(released.load(), 2);
}

TEST(ThreadComm, TimeoutNamesTheCall) {
  try {
    run_threaded_ranks(2, [](Comm& c) {
      c.set_timeout(0.2, "[comm] test_timeout");
      if (c.rank() == 0) {
        int32_t x = 0;
        c.recv(&x, 4, 1);  // rank 1 never sends
      }
    });
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 of 2: recv has not completed after 0.2 s ([comm] test_timeout)"),
              std::string::npos)
        << e.what();
  }
}
