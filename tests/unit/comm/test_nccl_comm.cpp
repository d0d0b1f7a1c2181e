// The NCCL Comm backend's host logic (comm/nccl_comm.h) over the in-process fake NCCL
// (fake_nccl.h), with the threaded backend as the bootstrap communicator: the unique-id bootstrap,
// the primitive cases every backend passes (comm_cases.h), rank-order reductions with the same
// bits as the bootstrap backend's, which NCCL calls each primitive issues, the step group's
// stream/event/group order, and no device memory or communicator left behind. No GPU: a GPU run
// of the real library is bench/cuda/device_check.sh's business.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "comm/nccl_comm.h"
#include "comm/thread_comm.h"
#include "common/fake_nccl.h"
#include "core/dtype.h"
#include "core/error.h"
#include "unit/comm/comm_cases.h"

using namespace titan;
using namespace titan::comm;
using titan::test::FakeNccl;

namespace {

// fn(nccl comm, fake, bootstrap) on n threaded ranks; afterwards every rank's communicators are
// gone, and with them all device memory and NCCL communicators.
template <class Fn>
void on_nccl_ranks(int n, Fn fn) {
  run_threaded_ranks(
      n,
      [&](Comm& boot) {
        FakeNccl api;
        {
          NcclComm c(boot, api);
          fn(c, api, boot);
        }
        EXPECT_EQ(api.live_device_bytes(), 0u) << "rank " << boot.rank();
        EXPECT_EQ(api.live_comms(), 0) << "rank " << boot.rank();
      },
      120);
}

void for_worlds(void (*fn)(Comm&)) {
  for (int n = 1; n <= 4; ++n) {
    SCOPED_TRACE("ranks " + std::to_string(n));
    on_nccl_ranks(n, [&](NcclComm& c, FakeNccl&, Comm&) { fn(c); });
  }
}

size_t count(const std::vector<std::string>& log, const std::string& prefix) {
  return size_t(std::count_if(log.begin(), log.end(), [&](const std::string& s) { return s.rfind(prefix, 0) == 0; }));
}

}  // namespace

// Rank 0 alone asks for the id; every rank joins the world of that one id (the fake's init_rank
// waits for all ranks of the id's world, so a rank with another id would fail, not pass).
TEST(NcclComm, RankZerosUniqueIdReachesEveryRank) {
  std::mutex m;
  std::vector<std::string> inits;
  const uint64_t before = test::fake_nccl_ids_made();
  on_nccl_ranks(3, [&](NcclComm& c, FakeNccl& api, Comm& boot) {
    EXPECT_EQ(c.rank(), boot.rank());
    EXPECT_EQ(c.size(), 3);
    EXPECT_STREQ(c.backend(), "nccl");
    EXPECT_EQ(count(api.log(), "get_unique_id"), c.rank() == 0 ? 1u : 0u);
    ASSERT_EQ(count(api.log(), "init_rank"), 1u);
    const std::string& init = *std::find_if(api.log().begin(), api.log().end(),
                                            [](const std::string& s) { return s.rfind("init_rank", 0) == 0; });
    std::lock_guard<std::mutex> l(m);
    inits.push_back(init.substr(init.find(" id=")));
  });
  EXPECT_EQ(test::fake_nccl_ids_made(), before + 1);
  ASSERT_EQ(inits.size(), 3u);
  EXPECT_EQ(inits[0], inits[1]);
  EXPECT_EQ(inits[0], inits[2]);
  EXPECT_EQ(inits[0], " id=" + std::to_string(before + 1));
}

TEST(NcclComm, AllToAllV) { for_worlds(test::case_all_to_all_v); }
TEST(NcclComm, SendRecvRing) { for_worlds(test::case_send_recv_ring); }
TEST(NcclComm, AsyncWorkRunsInOrder) { for_worlds(test::case_async_in_order); }
TEST(NcclComm, SplitBootstrapsOneNcclCommunicatorPerPart) { for_worlds(test::case_split_by_parity); }

// Comm's reductions over NCCL's byte primitives: the same bits as over the bootstrap (threaded)
// backend, f32 and bf16, all_reduce (a size that is not a multiple of the ranks), reduce_scatter,
// all_gather, broadcast, the scalar sums.
TEST(NcclComm, ReductionsHaveTheBootstrapBackendsBits) {
  on_nccl_ranks(3, [](NcclComm& c, FakeNccl&, Comm& boot) {
    const int r = c.rank();
    const int64_t n = 1001;
    std::vector<float> a(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) a[size_t(i)] = float((i * 37 + r * 101) % 211) / 7.0f * (r == 1 ? 1e-3f : 1.0f);
    std::vector<float> x = a, y = a;
    c.all_reduce(x.data(), n, ReduceOp::Avg);
    boot.all_reduce(y.data(), n, ReduceOp::Avg);
    EXPECT_EQ(std::memcmp(x.data(), y.data(), size_t(n) * 4), 0);
    std::vector<uint16_t> hb(static_cast<size_t>(n)), hb2;
    for (int64_t i = 0; i < n; ++i) hb[size_t(i)] = f32_to_bf16(a[size_t(i)]);
    hb2 = hb;
    c.all_reduce(hb.data(), n, ReduceOp::Sum);
    boot.all_reduce(hb2.data(), n, ReduceOp::Sum);
    EXPECT_EQ(hb, hb2);
    std::vector<float> rs(333), rs2(333), ag(size_t(3 * 333)), ag2(size_t(3 * 333));
    c.reduce_scatter(a.data(), rs.data(), 333, ReduceOp::Sum);
    boot.reduce_scatter(a.data(), rs2.data(), 333, ReduceOp::Sum);
    EXPECT_EQ(rs, rs2);
    c.all_gather(rs.data(), ag.data(), 333);
    boot.all_gather(rs2.data(), ag2.data(), 333);
    EXPECT_EQ(ag, ag2);
    std::vector<int32_t> b(7, r == 2 ? 42 : -1);
    c.broadcast(b.data(), b.size() * 4, 2);
    EXPECT_EQ(b, std::vector<int32_t>(7, 42));
    EXPECT_EQ(c.all_reduce_sum(int64_t(r + 1)), 6);
    EXPECT_EQ(c.all_reduce_max(double(r) * 0.5), 1.0);
  });
}

// What each primitive issues: all_gather and broadcast one NCCL collective in a group; all_to_all
// a send and a receive per rank (self included) in one group; all_to_all_v skips empty blocks;
// send/recv and barrier go to the bootstrap, not to NCCL; every primitive ends with the stream
// synchronised (its result is in host memory on return).
TEST(NcclComm, EachPrimitiveIsOneGroupOfTheRightCalls) {
  on_nccl_ranks(2, [](NcclComm& c, FakeNccl& api, Comm&) {
    const int r = c.rank();
    const std::string sync = "stream_synchronize s" + std::to_string(reinterpret_cast<uintptr_t>(c.stream()));
    std::vector<float> in(12, float(r)), out(12);
    api.clear_log();
    c.all_gather(in.data(), out.data(), 6);
    EXPECT_EQ(api.log(), (std::vector<std::string>{"group_start", "all_gather u8 x24", "group_end", sync}));
    api.clear_log();
    c.all_to_all_bytes(out.data(), in.data(), 24);
    EXPECT_EQ(api.log(), (std::vector<std::string>{"group_start", "send u8 x24 peer=0", "recv u8 x24 peer=0",
                                                   "send u8 x24 peer=1", "recv u8 x24 peer=1", "group_end", sync}));
    // Rank 0 sends 4 bytes to rank 1 and nothing to itself; rank 1 sends nothing.
    const size_t sb[2][2] = {{0, 4}, {0, 0}}, rb[2][2] = {{0, 0}, {4, 0}};
    api.clear_log();
    c.all_to_all_v_bytes(in.data(), sb[r], out.data(), rb[r]);
    if (r == 0)
      EXPECT_EQ(api.log(), (std::vector<std::string>{"group_start", "send u8 x4 peer=1", "group_end", sync}));
    else
      EXPECT_EQ(api.log(), (std::vector<std::string>{"group_start", "recv u8 x4 peer=0", "group_end", sync}));
    EXPECT_EQ(out[0], r == 1 ? 0.0f : out[0]);
    api.clear_log();
    c.broadcast(in.data(), 8, 1);
    EXPECT_EQ(api.log(), (std::vector<std::string>{"group_start", "broadcast u8 x8 root=1", "group_end", sync}));
    api.clear_log();
    int32_t token = 7 + r, got = 0;
    c.send(&token, 4, 1 - r);
    c.recv(&got, 4, 1 - r);
    c.barrier();
    EXPECT_EQ(got, 8 - r);
    EXPECT_TRUE(api.log().empty()) << api.log().front();
  });
}

// The step group: the communication stream waits on an event of the compute stream, the step's
// collectives are one NCCL group on the communication stream, its end is an event the compute
// stream waits on. Results: the fake's rank-order sums on "device" buffers.
TEST(NcclComm, StepGroupWaitsOnComputeAndIsOneGroup) {
  on_nccl_ranks(2, [](NcclComm& c, FakeNccl& api, Comm&) {
    const int r = c.rank();
    const nccl::Stream compute = reinterpret_cast<nccl::Stream>(uintptr_t(1000));
    const std::string s = "s" + std::to_string(reinterpret_cast<uintptr_t>(c.stream()));
    std::vector<float> grads(10, float(r + 1)), shard(3), full(6), mine(3, float(r + 7));
    std::vector<float> params(6, float(10 * r));
    std::vector<uint16_t> g16(4, f32_to_bf16(float(r + 1) * 0.5f));
    NcclStepGroup step(c);
    step.all_reduce(grads.data(), 10, ReduceOp::Avg);
    step.reduce_scatter(params.data(), shard.data(), 3, ReduceOp::Sum);
    step.all_gather(mine.data(), full.data(), 3);  // not `shard`: a group's collectives are independent
    step.all_reduce_bf16(g16.data(), 4, ReduceOp::Sum);
    step.all_reduce(grads.data(), 0, ReduceOp::Sum);  // empty: not issued
    EXPECT_EQ(step.size(), 4u);
    api.clear_log();
    step.issue(compute);
    ASSERT_EQ(api.log().size(), 9u);
    const std::string ready = api.log()[0].substr(std::string("event_record ").size(), 2);
    EXPECT_EQ(api.log()[0], "event_record " + ready + " s1000");
    EXPECT_EQ(api.log()[1], "stream_wait_event " + s + " " + ready);
    EXPECT_EQ(api.log()[2], "group_start");
    EXPECT_EQ(api.log()[3], "all_reduce f32 x10 avg");
    EXPECT_EQ(api.log()[4], "reduce_scatter f32 x3 sum");
    EXPECT_EQ(api.log()[5], "all_gather f32 x3");
    EXPECT_EQ(api.log()[6], "all_reduce bf16 x4 sum");
    EXPECT_EQ(api.log()[7], "group_end");
    const std::string done = api.log()[8].substr(std::string("event_record ").size(), 2);
    EXPECT_NE(done, ready);
    EXPECT_EQ(api.log()[8], "event_record " + done + " " + s);
    // join: the compute stream waits on the end event; nothing else (the host does not block).
    step.join(compute);
    ASSERT_EQ(api.log().size(), 10u);
    EXPECT_EQ(api.log()[9], "stream_wait_event s1000 " + done);
    for (float v : grads) EXPECT_EQ(v, 1.5f);
    for (float v : shard) EXPECT_EQ(v, 10.0f);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(full[size_t(i)], float(i / 3 + 7));
    for (uint16_t v : g16) EXPECT_EQ(bf16_to_f32(v), 1.5f);
    EXPECT_THROW(step.issue(compute), Error);
    EXPECT_THROW(step.all_reduce(grads.data(), 1, ReduceOp::Sum), Error);
  });
}

// A group whose collective reads what another of the same group writes is refused (by the fake,
// as NCCL may run a group's collectives concurrently): on every rank, not a hang.
TEST(NcclComm, StepGroupOfDependentCollectivesIsAnError) {
  int errors = 0;
  std::mutex m;
  on_nccl_ranks(2, [&](NcclComm& c, FakeNccl&, Comm&) {
    std::vector<float> in(4, 1.0f), shard(2), full(4);
    NcclStepGroup step(c);
    step.reduce_scatter(in.data(), shard.data(), 2, ReduceOp::Sum);
    step.all_gather(shard.data(), full.data(), 2);
    try {
      step.issue(nullptr);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("reads what"), std::string::npos) << e.what();
      std::lock_guard<std::mutex> l(m);
      ++errors;
    }
  });
  EXPECT_EQ(errors, 2);
}
