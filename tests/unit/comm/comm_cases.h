// Cases of the communicator primitives the parallel layers need (all-to-all with per-rank counts,
// point-to-point, asynchronous work, split), written once against comm::Comm and run by the
// threaded backend (tests/unit/comm, 1-4 ranks in one process) and the MPI one
// (tests/unit/distributed/test_comm.cpp under mpirun: tests/cli/dist_comm.sh). Every expectation
// holds for any world size.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "comm/comm.h"

namespace titan::test {

// Rank p sends (p + q) % 3 + q elements of value 1000 p + 10 q + i to rank q (some empty blocks).
inline int64_t a2av_count(int p, int q) { return (p + q) % 3 + q - (p == q ? q : 0); }

inline void case_all_to_all_v(comm::Comm& c) {
  const int n = c.size(), r = c.rank();
  std::vector<int64_t> send_counts(static_cast<size_t>(n)), recv_counts(static_cast<size_t>(n)), told(static_cast<size_t>(n));
  std::vector<float> in;
  for (int q = 0; q < n; ++q) {
    send_counts[size_t(q)] = a2av_count(r, q);
    for (int64_t i = 0; i < send_counts[size_t(q)]; ++i) in.push_back(float(1000 * r + 10 * q + i));
  }
  c.exchange_counts(send_counts.data(), told.data());
  for (int p = 0; p < n; ++p) {
    recv_counts[size_t(p)] = a2av_count(p, r);
    EXPECT_EQ(told[size_t(p)], recv_counts[size_t(p)]) << "count from rank " << p;
  }
  std::vector<float> out(size_t(std::accumulate(recv_counts.begin(), recv_counts.end(), int64_t(0))) + 1, -1.0f);
  comm::all_to_all_v(c, in.data(), send_counts.data(), out.data(), recv_counts.data());
  size_t k = 0;
  for (int p = 0; p < n; ++p)
    for (int64_t i = 0; i < recv_counts[size_t(p)]; ++i, ++k)
      EXPECT_EQ(out[k], float(1000 * p + 10 * r + i)) << "from rank " << p << " element " << i;
  EXPECT_EQ(out[k], -1.0f) << "wrote past the received blocks";
}

inline void case_send_recv_ring(comm::Comm& c) {
  const int n = c.size(), r = c.rank();
  // Two messages to the next rank, received in order from the previous one.
  std::vector<int32_t> a(5, r), b(3, 100 + r), got_a(5), got_b(3);
  c.send(a.data(), a.size() * 4, (r + 1) % n);
  c.send(b.data(), b.size() * 4, (r + 1) % n);
  const int prev = (r + n - 1) % n;
  c.recv(got_a.data(), got_a.size() * 4, prev);
  c.recv(got_b.data(), got_b.size() * 4, prev);
  for (int32_t v : got_a) EXPECT_EQ(v, prev);
  for (int32_t v : got_b) EXPECT_EQ(v, 100 + prev);
  c.barrier();
}

inline void case_async_in_order(comm::Comm& c) {
  const int n = c.size(), r = c.rank();
  std::vector<double> sums(3, 0.0);
  std::vector<float> buf(10, float(r + 1));
  // Three queued works run in order on the communication thread, while this thread computes.
  comm::CommWork w1 = c.start([&](comm::Comm& cc) { sums[0] = cc.all_reduce_sum(double(r)); });
  comm::CommWork w2 = c.start([&](comm::Comm& cc) { cc.all_reduce(buf.data(), 10, comm::ReduceOp::Sum); });
  comm::CommWork w3 = c.start([&](comm::Comm& cc) { sums[2] = cc.all_reduce_sum(sums[0]); });
  w1.wait();
  w2.wait();
  w3.wait();
  EXPECT_TRUE(w1.done() && w2.done() && w3.done());
  EXPECT_EQ(sums[0], double(n) * (n - 1) / 2);
  EXPECT_EQ(sums[2], double(n) * sums[0]);
  for (float v : buf) EXPECT_EQ(v, float(n) * (n + 1) / 2);
  // A synchronous call after unwaited work waits for it first (the same order on every rank).
  double late = -1;
  comm::CommWork w4 = c.start([&](comm::Comm& cc) { late = cc.all_reduce_sum(1.0); });
  EXPECT_EQ(c.all_reduce_sum(2.0), 2.0 * n);
  EXPECT_EQ(late, double(n));
  // An error inside the work is rethrown by wait().
  comm::CommWork bad = c.start([](comm::Comm&) { throw std::runtime_error("boom"); });
  EXPECT_THROW(bad.wait(), std::runtime_error);
}

inline void case_split_by_parity(comm::Comm& c) {
  const int n = c.size(), r = c.rank();
  // Even and odd ranks, each group ordered by descending world rank.
  std::unique_ptr<comm::Comm> g = c.split(r % 2, -r);
  const int members = (n - r % 2 + 1) / 2;
  EXPECT_EQ(g->size(), members);
  std::vector<int32_t> world_ranks(size_t(g->size()));
  int32_t me = r;
  g->all_gather_bytes(&me, world_ranks.data(), 4);
  for (int k = 0; k < g->size(); ++k) {
    EXPECT_EQ(world_ranks[size_t(k)] % 2, r % 2);
    if (k) {
      EXPECT_GT(world_ranks[size_t(k - 1)], world_ranks[size_t(k)]) << "ordered by key";
    }
  }
  EXPECT_EQ(world_ranks[size_t(g->rank())], r);
}

}  // namespace titan::test
