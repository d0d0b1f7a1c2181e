// ParallelDims' rules and DeviceMesh's groups: coordinates from the layout, every group's members
// checked on 2x2 and 3-D threaded meshes (the ranks of a group exchange their world ranks and
// compare with what the layout says).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "comm/device_mesh.h"
#include "comm/thread_comm.h"
#include "core/error.h"
#include "unit/comm/comm_cases.h"

using namespace titan;
using namespace titan::comm;

namespace {

std::string refusal(const ParallelDegrees& d, int64_t world, const ModelDims& m = {}) {
  try {
    ParallelDims::resolve(d, world, m);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The world ranks of my group `g`, in group order, and those the layout predicts: every rank q
// whose coordinates equal mine off `same_off` (a predicate on q), ordered by `order(q)`.
void expect_group(Comm& world, Comm& g, const std::function<bool(int64_t)>& member,
                  const std::function<int64_t(int64_t)>& order, const char* name) {
  std::vector<int32_t> got(size_t(g.size()));
  int32_t me = world.rank();
  g.all_gather_bytes(&me, got.data(), 4);
  std::vector<int32_t> want;
  for (int64_t q = 0; q < world.size(); ++q)
    if (member(q)) want.push_back(int32_t(q));
  std::sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return order(a) < order(b); });
  EXPECT_EQ(got, want) << name << " group of world rank " << world.rank();
}

void check_mesh(const ParallelDegrees& d, int world) {
  run_threaded_ranks(world, [&](Comm& w) {
    const ParallelDims dims = ParallelDims::resolve(d, w.size());
    DeviceMesh mesh(w, dims);
    const MeshLayout& L = mesh.layout();
    const int64_t r = w.rank();
    using A = MeshAxis;
    auto same = [&](int64_t q, std::initializer_list<A> free) {
      for (int i = 0; i < kMeshAxes; ++i) {
        bool f = false;
        for (A a : free) f = f || a == A(i);
        if (!f && L.coord(q, A(i)) != L.coord(r, A(i))) return false;
      }
      return true;
    };
    auto by = [&](std::initializer_list<A> axes) {
      return [&L, axes](int64_t q) {
        int64_t k = 0;
        for (A a : axes) k = k * L.extent(a) + L.coord(q, a);
        return k;
      };
    };
    expect_group(w, mesh.tp(), [&](int64_t q) { return same(q, {A::TP}); }, by({A::TP}), "tp");
    expect_group(w, mesh.cp(), [&](int64_t q) { return same(q, {A::CP}); }, by({A::CP}), "cp");
    expect_group(w, mesh.pp(), [&](int64_t q) { return same(q, {A::PP}); }, by({A::PP}), "pp");
    expect_group(w, mesh.dp_shard(), [&](int64_t q) { return same(q, {A::DpShard}); }, by({A::DpShard}), "dp_shard");
    expect_group(w, mesh.dp_replicate(), [&](int64_t q) { return same(q, {A::DpReplicate}); }, by({A::DpReplicate}),
                 "dp_replicate");
    expect_group(w, mesh.fsdp(), [&](int64_t q) { return same(q, {A::DpShard, A::CP}); }, by({A::DpShard, A::CP}),
                 "fsdp");
    expect_group(w, mesh.batch(), [&](int64_t q) { return same(q, {A::DpReplicate, A::DpShard}); },
                 by({A::DpReplicate, A::DpShard}), "batch");
    expect_group(w, mesh.loss(), [&](int64_t q) { return same(q, {A::DpReplicate, A::DpShard, A::CP}); },
                 by({A::DpReplicate, A::DpShard, A::CP}), "loss");
    auto ep_members = [&](int64_t q) {
      return same(q, {A::DpShard, A::CP, A::TP}) && L.expert_fsdp_rank(q) == L.expert_fsdp_rank(r);
    };
    expect_group(w, mesh.ep(), ep_members, [&](int64_t q) { return L.ep_rank(q); }, "ep");
    auto efsdp_members = [&](int64_t q) { return same(q, {A::DpShard, A::CP, A::TP}) && L.ep_rank(q) == L.ep_rank(r); };
    expect_group(w, mesh.expert_fsdp(), efsdp_members, [&](int64_t q) { return L.expert_fsdp_rank(q); },
                 "expert_fsdp");
    EXPECT_EQ(mesh.batch().rank(), mesh.batch_rank());
    EXPECT_EQ(mesh.tp().rank(), mesh.coord(A::TP));
    EXPECT_EQ(mesh.ep().size(), dims.ep);
    EXPECT_EQ(mesh.expert_fsdp().size(), dims.expert_fsdp());
    // The groups carry traffic: a collective on each sub-group of the 2-D/3-D mesh.
    test::case_all_to_all_v(mesh.tp());
    test::case_send_recv_ring(mesh.fsdp());
    EXPECT_EQ(mesh.loss().all_reduce_sum(int64_t(1)), dims.loss());
  });
}

}  // namespace

TEST(ParallelDims, ShardDegreeTakesTheRest) {
  ParallelDegrees d;
  d.dp_replicate = 2, d.tp = 2;
  const ParallelDims p = ParallelDims::resolve(d, 8);
  EXPECT_EQ(p.dp_shard, 2);
  EXPECT_EQ(p.fsdp(), 2);
  EXPECT_EQ(p.batch(), 4);
  EXPECT_EQ(p.loss(), 4);
  EXPECT_TRUE(p.hsdp());
  EXPECT_EQ(p.describe(), "dp_replicate=2 dp_shard=2 cp=1 tp=2 pp=1 ep=1 (world 8)");
}

TEST(ParallelDims, RefusalsNameTheKeys) {
  ParallelDegrees d;
  d.tp = 3;
  EXPECT_TRUE(has(refusal(d, 8), "the 8 ranks are not divisible by [parallelism] data_parallel_replicate_degree x "
                                 "[parallelism] context_parallel_degree x [parallelism] tensor_parallel_degree"))
      << refusal(d, 8);
  d = {};
  d.dp_shard = 2;
  EXPECT_TRUE(has(refusal(d, 8), "= 2, not the 8 ranks of this run")) << refusal(d, 8);
  d = {};
  d.ep = 3;
  EXPECT_TRUE(has(refusal(d, 4), "[parallelism] expert_parallel_degree = 3 does not divide")) << refusal(d, 4);
  d = {};
  d.tp = 2;
  ModelDims m;
  m.heads = 16, m.kv_heads = 3;
  EXPECT_TRUE(has(refusal(d, 2, m), "[parallelism] tensor_parallel_degree = 2 does not divide the model's key/value "
                                    "heads (num_key_value_heads) (3)"))
      << refusal(d, 2, m);
  d = {};
  d.ep = 4;
  m = {};
  m.experts = 6;
  EXPECT_TRUE(has(refusal(d, 4, m), "experts (num_experts) (6)")) << refusal(d, 4, m);
  d = {};
  d.cp = 0;
  EXPECT_TRUE(has(refusal(d, 4), "[parallelism] context_parallel_degree must be >= 1, got 0")) << refusal(d, 4);
  d = {};
  d.pp = 4;
  m = {};
  m.layers = 2;
  EXPECT_TRUE(has(refusal(d, 4, m), "pipeline_parallel_degree = 4 is more than the model's 2 layers"));
}

TEST(MeshLayout, TensorParallelRanksAreConsecutive) {
  ParallelDegrees d;
  d.dp_replicate = 2, d.tp = 2, d.pp = 2;
  const MeshLayout L(ParallelDims::resolve(d, 16));  // pp 2 x rep 2 x shard 2 x cp 1 x tp 2
  EXPECT_EQ(L.coord(0, MeshAxis::TP), 0);
  EXPECT_EQ(L.coord(1, MeshAxis::TP), 1);
  EXPECT_EQ(L.coord(2, MeshAxis::DpShard), 1);
  EXPECT_EQ(L.coord(4, MeshAxis::DpReplicate), 1);
  EXPECT_EQ(L.coord(8, MeshAxis::PP), 1);
  EXPECT_EQ(L.batch_rank(6), 3);  // rep 1, shard 1
}

TEST(DeviceMesh, GroupsOn2x2) {
  ParallelDegrees d;
  d.tp = 2;  // dp_shard 2 x tp 2
  check_mesh(d, 4);
  d = {};
  d.dp_replicate = 2;  // HSDP 2 x 2
  check_mesh(d, 4);
}

TEST(DeviceMesh, GroupsOn3dMeshes) {
  ParallelDegrees d;
  d.dp_replicate = 2, d.cp = 2, d.ep = 2;  // rep 2 x shard 2 x cp 2; ep borrows from shard x cp
  check_mesh(d, 8);
  d = {};
  d.pp = 2, d.tp = 2, d.ep = 4;  // pp 2 x shard 2 x tp 2; ep = shard x tp
  check_mesh(d, 8);
}
