// DataParallel's device path: a ParamStore on cuda:0 (grid emulator memory) whose gradients are
// summed over the ranks by NCCL in place, as one NcclStepGroup, over the in-process fake NCCL
// (tests/common/fake_nccl.h: ranks as threads, reductions in rank order). The sums equal the
// per-rank inputs summed in rank order, every rank holds the same bits, the calls are one group
// between the compute stream's events; a host communicator, the host-only halves, ranks whose
// gradients differ and a build without NCCL are refused in one line. The fake reads device memory
// as host memory, which only the emulator's is: a TITAN_CUDA_RUNTIME build skips these.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/nccl_comm.h"
#include "comm/thread_comm.h"
#include "common/fake_nccl.h"
#include "common/test_util.h"
#include "distributed/backends.h"
#include "distributed/data_parallel.h"

using namespace titan;
using namespace titan::distributed;
using comm::NcclComm;
using test::FakeNccl;

namespace {

const Device kGpu{DeviceType::CUDA, 0};

float grad_of(int rank, size_t p, int64_t i) { return 0.05f * float((i * 3 + int64_t(p) * 5 + rank * 7) % 17) - 0.4f; }

// Parameters of odd sizes, an empty one, and two row views of one fused buffer (one all_reduce):
// f32 values of rank `rank` on the host.
struct HostGrads {
  std::vector<std::string> names = {"a", "b", "empty", "fused.q", "fused.kv", "c"};
  std::vector<Tensor> g;
  explicit HostGrads(int rank) {
    const std::vector<Shape> shapes = {{5, 3}, {7}, {0}, {2, 4}, {3, 4}, {2, 11}};
    for (size_t p = 0; p < shapes.size(); ++p) {
      Tensor t = Tensor::zeros(shapes[p], DType::F32);
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = grad_of(rank, p, i);
      g.push_back(t);
    }
  }
};

// The same gradients in a ParamStore on the GPU, q and kv sharing one buffer.
ParamStore gpu_store(int rank) {
  const HostGrads h(rank);
  ParamStore ps;
  Tensor fused = Tensor::empty({5, 4}, DType::F32, kGpu);
  for (size_t p = 0; p < h.g.size(); ++p) {
    Tensor g;
    if (h.names[p] == "fused.q")
      g = fused.slice0(0, 2);
    else if (h.names[p] == "fused.kv")
      g = fused.slice0(2, 5);
    else
      g = Tensor::empty(h.g[p].shape(), DType::F32, kGpu);
    g.copy_(h.g[p]);
    ps.add(h.names[p], Tensor::zeros(h.g[p].shape(), DType::F32, kGpu), g);
  }
  return ps;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

size_t count(const std::vector<std::string>& log, const std::string& prefix) {
  size_t n = 0;
  for (const std::string& s : log) n += s.rfind(prefix, 0) == 0;
  return n;
}

}  // namespace

TEST(DataParallelGpu, OneNcclGroupSumsEveryRanksGradients) {
#ifdef TITAN_CUDA_RUNTIME
  GTEST_SKIP() << "the fake NCCL reads device memory as host memory (emulator builds only)";
#endif
  for (int world : {1, 2, 3}) {
    SCOPED_TRACE("ranks " + std::to_string(world));
    std::vector<ParamStore> stores;
    for (int r = 0; r < world; ++r) stores.push_back(gpu_store(r));
    std::vector<std::vector<std::string>> logs(static_cast<size_t>(world));
    void* const compute = reinterpret_cast<void*>(uintptr_t(1000));
    comm::run_threaded_ranks(
        world,
        [&](comm::Comm& boot) {
          FakeNccl api;
          NcclComm c(boot, api);
          DataParallel dp(stores[size_t(c.rank())], c, compute);
          EXPECT_TRUE(dp.on_device());
          EXPECT_EQ(dp.staging_bytes(), 0);
          api.clear_log();
          dp.all_reduce_grads();
          logs[size_t(c.rank())] = api.log();
        },
        120);
    // The calls: the communication stream waits on the compute stream, one group of all_reduces (the
    // fused pair is one, the empty parameter none), the compute stream waits on the group's end.
    for (int r = 0; r < world; ++r) {
      const std::vector<std::string>& log = logs[size_t(r)];
      ASSERT_EQ(log.size(), 10u) << r;
      EXPECT_EQ(log[0].substr(0, 13), "event_record ");
      EXPECT_NE(log[0].find(" s1000"), std::string::npos) << log[0];
      EXPECT_EQ(log[1].substr(0, 18), "stream_wait_event ");
      EXPECT_EQ(log[2], "group_start");
      EXPECT_EQ(log[3], "all_reduce f32 x15 sum");
      EXPECT_EQ(log[4], "all_reduce f32 x7 sum");
      EXPECT_EQ(log[5], "all_reduce f32 x20 sum");
      EXPECT_EQ(log[6], "all_reduce f32 x22 sum");
      EXPECT_EQ(log[7], "group_end");
      EXPECT_EQ(log[9].substr(0, 23), "stream_wait_event s1000");
      EXPECT_EQ(count(log, "copy_to"), 0u) << "host staging";
    }
    // Sums: the per-rank inputs added in rank order (the fake's order), the same bits on every rank.
    std::vector<Tensor> want = HostGrads(0).g;
    for (int q = 1; q < world; ++q) {
      const HostGrads h(q);
      for (size_t p = 0; p < want.size(); ++p)
        for (int64_t i = 0; i < want[p].numel(); ++i) want[p].data<float>()[i] += h.g[p].data<float>()[i];
    }
    for (int r = 0; r < world; ++r)
      for (size_t p = 0; p < want.size(); ++p) {
        const Tensor& g = stores[size_t(r)].all()[p].grad;
        ASSERT_EQ(g.device(), kGpu);
        EXPECT_TRUE(same_bits(g.to(cpu()), want[p])) << "rank " << r << " " << stores[size_t(r)].all()[p].name;
      }
  }
}

TEST(DataParallelGpu, RefusesHostCommunicatorsMixedDevicesAndRanksThatDiffer) {
#ifdef TITAN_CUDA_RUNTIME
  GTEST_SKIP() << "the fake NCCL reads device memory as host memory (emulator builds only)";
#endif
  ParamStore one = gpu_store(0);
  comm::LocalComm local;
  EXPECT_ERROR_HAS(DataParallel dp(one, local),
                   "data parallelism of a model on cuda:0: its gradients are summed by "
                   "NCCL, but the communicator is 'local'");
  // A parameter on the host beside GPU ones.
  ParamStore mixed = gpu_store(0);
  mixed.add("host", Tensor::zeros({3}, DType::F32), Tensor::zeros({3}, DType::F32));
  EXPECT_ERROR_HAS(DataParallel dp(mixed, local), "parameter host or its gradient is not on cuda:0");
  // Ranks with different gradients: the same verdict on every rank, not a hang.
  std::vector<ParamStore> stores = {gpu_store(0), gpu_store(1)};
  stores[1].add("extra", Tensor::zeros({4}, DType::F32, kGpu), Tensor::zeros({4}, DType::F32, kGpu));
  std::mutex m;
  std::vector<std::string> errors;
  comm::run_threaded_ranks(
      2,
      [&](comm::Comm& boot) {
        FakeNccl api;
        NcclComm c(boot, api);
        const std::string e = test::error_of([&] { DataParallel dp(stores[size_t(c.rank())], c); });
        std::lock_guard<std::mutex> l(m);
        errors.push_back(e);
      },
      120);
  ASSERT_EQ(errors.size(), 2u);
  for (const std::string& e : errors) EXPECT_NE(e.find("the ranks' gradients differ"), std::string::npos) << e;
}

TEST(DataParallelGpu, HostOnlyHalvesRefuseAGpuStore) {
#ifdef TITAN_CUDA_RUNTIME
  GTEST_SKIP() << "the fake NCCL reads device memory as host memory (emulator builds only)";
#endif
  ParamStore ps = gpu_store(0);
  comm::run_threaded_ranks(
      1,
      [&](comm::Comm& boot) {
        FakeNccl api;
        NcclComm c(boot, api);
        DataParallel dp(ps, c);
        EXPECT_ERROR_HAS(dp.reduce_scatter_grads(),
                         "data parallelism: reduce_scatter_grads is not built for gradients "
                         "on the GPU");
        std::vector<float> buf(size_t(dp.chunk()));
        EXPECT_ERROR_HAS(dp.all_gather_values(buf.data()), "all_gather_values is not built");
        EXPECT_ERROR_HAS(dp.read_value_chunk(buf.data()), "read_value_chunk is not built");
      },
      120);
}

// Without NCCL in the build (the emulator: no TITAN_CUDA_RUNTIME), asking for the GPU data-parallel
// communicator is a one-line error naming the build option.
TEST(DataParallelGpu, MakeNcclCommNeedsTheCudaRuntime) {
  if (nccl_available()) GTEST_SKIP() << "this build has NCCL";
  comm::LocalComm local;
  EXPECT_ERROR_HAS(make_nccl_comm(local),
                   "data parallelism on the GPU needs NCCL, which this build lacks: "
                   "configure with -DTITAN_CUDA_RUNTIME=ON");
}
