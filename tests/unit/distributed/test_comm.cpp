// Collectives of comm::Comm. Run as one process (LocalComm, ctest "distributed") and under mpirun with
// several ranks (MpiComm, tests/cli/dist_comm.sh): every expectation holds for any world size.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "comm/comm.h"
#include "unit/comm/comm_cases.h"
#include "unit/distributed/dist_test_util.h"

using namespace titan;
using namespace titan::distributed;

namespace {

// A value whose f32 sum depends on the order of addition.
float val(int rank, int64_t i) { return (rank % 2 ? 1e-3f : 1.0f) * float(1 + (i * 7 + rank * 13) % 97) / 3.0f; }

}  // namespace

TEST(Comm, ReduceScatterSumsInRankOrder) {
  Comm& c = test_comm();
  const int n = c.size(), r = c.rank();
  const int64_t chunk = 1000;
  std::vector<float> in(size_t(n * chunk)), out(static_cast<size_t>(chunk));
  for (int64_t i = 0; i < n * chunk; ++i) in[size_t(i)] = val(r, i);
  c.reduce_scatter(in.data(), out.data(), chunk, ReduceOp::Sum);
  for (int64_t i = 0; i < chunk; ++i) {
    const int64_t g = int64_t(r) * chunk + i;
    float want = val(0, g);
    for (int q = 1; q < n; ++q) want += val(q, g);
    ASSERT_EQ(out[size_t(i)], want) << "element " << i;  // bitwise: rank-order f32 sum
  }
  c.reduce_scatter(in.data(), out.data(), chunk, ReduceOp::Avg);
  float want0 = val(0, int64_t(r) * chunk);
  for (int q = 1; q < n; ++q) want0 += val(q, int64_t(r) * chunk);
  EXPECT_EQ(out[0], want0 * (1.0f / float(n)));
}

TEST(Comm, AllGatherAndAllReducePadded) {
  Comm& c = test_comm();
  const int n = c.size(), r = c.rank();
  std::vector<float> mine(5, float(r) + 0.5f), all(size_t(5 * n));
  c.all_gather(mine.data(), all.data(), 5);
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 5; ++i) EXPECT_EQ(all[size_t(q * 5 + i)], float(q) + 0.5f);
  // 7 elements: not a multiple of most world sizes, so the padding path runs.
  std::vector<float> buf(7);
  for (int i = 0; i < 7; ++i) buf[size_t(i)] = val(r, i);
  c.all_reduce(buf.data(), 7, ReduceOp::Sum);
  for (int i = 0; i < 7; ++i) {
    float want = val(0, i);
    for (int q = 1; q < n; ++q) want += val(q, i);
    EXPECT_EQ(buf[size_t(i)], want);
  }
}

TEST(Comm, Bf16AccumulatesInF32) {
  Comm& c = test_comm();
  const int n = c.size();
  // 1 + n * 2^-9: each 2^-9 alone would vanish in bf16 (8 mantissa bits) when added to 1 there.
  std::vector<uint16_t> buf(3, f32_to_bf16(c.rank() == 0 ? 1.0f : 0.0f));
  buf[1] = f32_to_bf16(1.0f / 512.0f);
  c.all_reduce(buf.data(), 3, ReduceOp::Sum);
  EXPECT_EQ(bf16_to_f32(buf[0]), 1.0f);
  EXPECT_EQ(bf16_to_f32(buf[1]), float(n) / 512.0f);
}

TEST(Comm, Scalars) {
  Comm& c = test_comm();
  const int n = c.size();
  EXPECT_EQ(c.all_reduce_sum(int64_t(c.rank() + 1)), int64_t(n) * (n + 1) / 2);
  EXPECT_DOUBLE_EQ(c.all_reduce_sum(0.25 * (c.rank() + 1)), 0.25 * n * (n + 1) / 2);
  EXPECT_EQ(c.all_reduce_max(double(c.rank())), double(n - 1));
  int64_t b = c.rank() == 0 ? 42 : -1;
  c.broadcast(&b, sizeof b, 0);
  EXPECT_EQ(b, 42);
  c.barrier();
}

TEST(Comm, LargeBuffersMoveInPieces) {
  Comm& c = test_comm();
  const int n = c.size();
  const int64_t chunk = Comm::kPieceElems + 3;
  std::vector<float> in(size_t(n * chunk), 1.0f), out(static_cast<size_t>(chunk));
  in.back() = 2.0f;
  c.reduce_scatter(in.data(), out.data(), chunk, ReduceOp::Sum);
  EXPECT_EQ(out[0], float(n));
  EXPECT_EQ(out[size_t(chunk - 1)], c.rank() == n - 1 ? float(2 * n) : float(n));
  std::vector<float> all(size_t(n * chunk));
  c.all_gather(out.data(), all.data(), chunk);
  EXPECT_EQ(all.back(), float(2 * n));
}

TEST(Comm, CheckSameNamesEveryRank) {
  Comm& c = test_comm();
  EXPECT_NO_THROW(c.check_same("config hash", "abc123"));
  if (c.size() == 1) return;
  try {
    c.check_same("config hash", c.rank() == 1 ? "ffff" : "abc123");
    FAIL() << "no error on rank " << c.rank();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("ranks disagree on config hash"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1: ffff"), std::string::npos) << m;
  }
}

TEST(Comm, LocalIsOneRank) {
  LocalComm l;
  EXPECT_EQ(l.rank(), 0);
  EXPECT_EQ(l.size(), 1);
  float x[3] = {1, 2, 3};
  l.all_reduce(x, 3, ReduceOp::Avg);
  EXPECT_EQ(x[2], 3.0f);
}

TEST(Comm, SplitGroupsRanksByColorOrderedByKey) {
  Comm& c = test_comm();
  const int n = c.size(), r = c.rank();
  // Two colors (even / odd ranks), reverse rank order inside each group.
  auto sub = c.split(r % 2, n - r);
  const int group = (n + 1 - r % 2) / 2;  // ranks of my parity
  ASSERT_EQ(sub->size(), group);
  int later = 0;  // ranks of my parity above me come first (larger key = later: smaller n - r)
  for (int q = r + 2; q < n; q += 2) ++later;
  EXPECT_EQ(sub->rank(), later);
  // A reduction inside the group sums only its members.
  double mine = double(r + 1), want = 0;
  for (int q = r % 2; q < n; q += 2) want += double(q + 1);
  EXPECT_EQ(sub->all_reduce_sum(mine), want);
  sub->barrier();
}

// The primitives of the parallel layers (comm_cases.h; the threaded backend runs them too).
TEST(Comm, AllToAllV) { test::case_all_to_all_v(test_comm()); }
TEST(Comm, SendRecvRing) { test::case_send_recv_ring(test_comm()); }
TEST(Comm, AsyncWorkRunsInOrder) { test::case_async_in_order(test_comm()); }
TEST(Comm, SplitByParity) { test::case_split_by_parity(test_comm()); }
