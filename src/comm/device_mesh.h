// The device mesh: the world's ranks laid out on the axes [pp, dp_replicate, dp_shard, cp, tp]
// (row-major, tp fastest: the ranks of a tensor-parallel group are consecutive, so on one host
// when a host holds tp or more ranks), every sub-communicator a job needs created once, in one
// fixed order on every rank, and this rank's coordinates.
//
//   group        axes it spans                    used for
//   dp_replicate dp_replicate                     HSDP: summing the replicas' gradient shards
//   dp_shard     dp_shard                         -
//   fsdp         dp_shard x cp                    sharding parameters, gradients, optimizer state
//   cp, tp, pp   one axis each                    context / tensor / pipeline parallel layers
//   batch        dp_replicate x dp_shard          which rows of the global batch a rank reads
//   loss         dp_replicate x dp_shard x cp     the token count a loss is averaged over
//   ep           ep consecutive ranks of the flattened (dp_shard, cp, tp) index
//   expert_fsdp  the complement of ep in (dp_shard, cp, tp): sharding one expert's weights
//
// Ranks in a group are ordered by their coordinates on its axes, so group rank = coordinate.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "comm/comm.h"
#include "comm/parallel_dims.h"

namespace titan::comm {

// Axes of the mesh, outermost first.
enum class MeshAxis : int { PP = 0, DpReplicate = 1, DpShard = 2, CP = 3, TP = 4 };
inline constexpr int kMeshAxes = 5;

// The layout alone (no communicators): coordinates of any rank, for planning and `titan info`.
struct MeshLayout {
  ParallelDims dims;
  explicit MeshLayout(const ParallelDims& d) : dims(d) {}
  int64_t extent(MeshAxis a) const;
  // Coordinates of world rank r on each axis.
  int64_t coord(int64_t r, MeshAxis a) const;
  // Expert-parallel rank and expert-FSDP rank of world rank r.
  int64_t ep_rank(int64_t r) const;
  int64_t expert_fsdp_rank(int64_t r) const;
  // Index of r's rows of the global batch, 0 .. batch()-1.
  int64_t batch_rank(int64_t r) const;
};

class DeviceMesh {
 public:
  // Collective over `world` (every rank the same dims; checked).
  DeviceMesh(Comm& world, const ParallelDims& dims);
  ~DeviceMesh();
  DeviceMesh(const DeviceMesh&) = delete;
  DeviceMesh& operator=(const DeviceMesh&) = delete;

  const ParallelDims& dims() const { return layout_.dims; }
  const MeshLayout& layout() const { return layout_; }
  Comm& world() { return world_; }
  Comm& dp_replicate() { return *dp_replicate_; }
  Comm& dp_shard() { return *dp_shard_; }
  Comm& fsdp() { return *fsdp_; }
  Comm& cp() { return *cp_; }
  Comm& tp() { return *tp_; }
  Comm& pp() { return *pp_; }
  Comm& batch() { return *batch_; }
  Comm& loss() { return *loss_; }
  Comm& ep() { return *ep_; }
  Comm& expert_fsdp() { return *expert_fsdp_; }
  int64_t coord(MeshAxis a) const { return layout_.coord(world_.rank(), a); }
  int64_t batch_rank() const { return layout_.batch_rank(world_.rank()); }
  // "rank 5: pp 0 dp_replicate 1 dp_shard 0 cp 0 tp 1 ep 1 expert_fsdp 0"
  std::string describe_rank() const;

 private:
  Comm& world_;
  MeshLayout layout_;
  std::unique_ptr<Comm> dp_replicate_, dp_shard_, fsdp_, cp_, tp_, pp_, batch_, loss_, ep_, expert_fsdp_;
};

}  // namespace titan::comm
