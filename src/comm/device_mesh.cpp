#include "comm/device_mesh.h"

#include <initializer_list>

#include "core/error.h"

namespace titan::comm {

int64_t MeshLayout::extent(MeshAxis a) const {
  switch (a) {
    case MeshAxis::PP: return dims.pp;
    case MeshAxis::DpReplicate: return dims.dp_replicate;
    case MeshAxis::DpShard: return dims.dp_shard;
    case MeshAxis::CP: return dims.cp;
    case MeshAxis::TP: return dims.tp;
  }
  return 1;
}

int64_t MeshLayout::coord(int64_t r, MeshAxis a) const {
  int64_t stride = 1;
  for (int i = kMeshAxes - 1; i > int(a); --i) stride *= extent(MeshAxis(i));
  return (r / stride) % extent(a);
}

namespace {
// The flattened (dp_shard, cp, tp) index of world rank r, tp fastest: the pool expert
// parallelism borrows from.
int64_t ep_pool_index(const MeshLayout& m, int64_t r) {
  return (m.coord(r, MeshAxis::DpShard) * m.dims.cp + m.coord(r, MeshAxis::CP)) * m.dims.tp + m.coord(r, MeshAxis::TP);
}
}  // namespace

int64_t MeshLayout::ep_rank(int64_t r) const { return ep_pool_index(*this, r) % dims.ep; }
int64_t MeshLayout::expert_fsdp_rank(int64_t r) const { return ep_pool_index(*this, r) / dims.ep; }
int64_t MeshLayout::batch_rank(int64_t r) const {
  return coord(r, MeshAxis::DpReplicate) * dims.dp_shard + coord(r, MeshAxis::DpShard);
}

namespace {

// color = index over the axes outside `span`, key = index over those inside (row-major, in axis
// order): the group of ranks that differ only on `span`, ordered by their coordinates there.
std::unique_ptr<Comm> split_over(Comm& world, const MeshLayout& m, std::initializer_list<MeshAxis> span) {
  const int64_t r = world.rank();
  int64_t color = 0, key = 0;
  for (int i = 0; i < kMeshAxes; ++i) {
    const MeshAxis a = MeshAxis(i);
    bool in = false;
    for (MeshAxis s : span) in = in || s == a;
    int64_t& acc = in ? key : color;
    acc = acc * m.extent(a) + m.coord(r, a);
  }
  return world.split(int(color), int(key));
}

}  // namespace

DeviceMesh::DeviceMesh(Comm& world, const ParallelDims& dims) : world_(world), layout_(dims) {
  TITAN_CHECK(dims.world == world.size(), "mesh of ", dims.describe(), " for a world of ", world.size(), " ranks");
  world.check_same("the device mesh", dims.describe());
  using A = MeshAxis;
  dp_replicate_ = split_over(world, layout_, {A::DpReplicate});
  dp_shard_ = split_over(world, layout_, {A::DpShard});
  fsdp_ = split_over(world, layout_, {A::DpShard, A::CP});
  cp_ = split_over(world, layout_, {A::CP});
  tp_ = split_over(world, layout_, {A::TP});
  pp_ = split_over(world, layout_, {A::PP});
  batch_ = split_over(world, layout_, {A::DpReplicate, A::DpShard});
  loss_ = split_over(world, layout_, {A::DpReplicate, A::DpShard, A::CP});
  // Expert groups: within one (pp, dp_replicate) slice, blocks of ep consecutive pool indices.
  const int64_t r = world.rank();
  const int64_t slice = layout_.coord(r, A::PP) * dims.dp_replicate + layout_.coord(r, A::DpReplicate);
  const int64_t blocks = dims.expert_fsdp();
  ep_ = world.split(int(slice * blocks + layout_.expert_fsdp_rank(r)), int(layout_.ep_rank(r)));
  expert_fsdp_ = world.split(int(slice * dims.ep + layout_.ep_rank(r)), int(layout_.expert_fsdp_rank(r)));
}

DeviceMesh::~DeviceMesh() = default;

std::string DeviceMesh::describe_rank() const {
  const int64_t r = world_.rank();
  std::string s = "rank " + std::to_string(r) + ":";
  const char* names[kMeshAxes] = {"pp", "dp_replicate", "dp_shard", "cp", "tp"};
  for (int i = 0; i < kMeshAxes; ++i) s += std::string(" ") + names[i] + " " + std::to_string(layout_.coord(r, MeshAxis(i)));
  s += " ep " + std::to_string(layout_.ep_rank(r)) + " expert_fsdp " + std::to_string(layout_.expert_fsdp_rank(r));
  return s;
}

}  // namespace titan::comm
