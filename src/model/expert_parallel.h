// Expert parallelism inside the decoder (torchtitan's EP): every sparse layer's experts are split
// over the mesh's ep group, rank q holding experts [q E/ep, (q+1) E/ep) of each layer, stacked
// [E/ep, 2I, H] and [E/ep, H, I]; their HF parameters (mlp.experts.<e>.*) exist only on the rank
// that holds expert e (ParamSpec::expert, local_param_specs). Everything else (attention, norms,
// the router, a shared expert, the embedding and head) is whole on every rank of the group. The
// MoE op then dispatches each token's slots to the experts' owners and combines the results
// (ops/moe/expert_parallel.h).
//
// On the mesh, ep borrows ranks from dp_shard (comm/parallel_dims.h): the ranks of an ep group
// read different data, and the ranks that hold the same experts (the expert_fsdp group) shard
// those experts' weights, gradients and optimizer state as FSDP shards the rest over the fsdp group
// (distributed/fsdp.h). Training only, in f32 master weights (no LoRA, no generation).
#pragma once
#include <cstdint>

#include "comm/comm.h"

namespace titan {

struct ExpertParallel {
  comm::Comm* comm = nullptr;  // the mesh's ep group (null or size 1: none)
  int64_t size() const { return comm ? comm->size() : 1; }
  int64_t rank() const { return comm ? comm->rank() : 0; }
  bool on() const { return size() > 1; }
};

}  // namespace titan
