#include "comm/parallel_dims.h"

#include <initializer_list>
#include <utility>

#include "core/error.h"

namespace titan::comm {

namespace {

constexpr const char* kRep = "[parallelism] data_parallel_replicate_degree";
constexpr const char* kShard = "[parallelism] data_parallel_shard_degree";
constexpr const char* kCp = "[parallelism] context_parallel_degree";
constexpr const char* kTp = "[parallelism] tensor_parallel_degree";
constexpr const char* kPp = "[parallelism] pipeline_parallel_degree";
constexpr const char* kEp = "[parallelism] expert_parallel_degree";

void divides(int64_t degree, const char* key, int64_t what, const char* name) {
  if (what <= 0 || degree <= 1) return;
  TITAN_CHECK(what % degree == 0, key, " = ", degree, " does not divide the model's ", name, " (", what, ")");
}

}  // namespace

ParallelDims ParallelDims::resolve(const ParallelDegrees& d, int64_t world, const ModelDims& m) {
  TITAN_CHECK(world >= 1, "world of ", world, " ranks");
  for (auto [v, key] : std::initializer_list<std::pair<int64_t, const char*>>{
           {d.dp_replicate, kRep}, {d.cp, kCp}, {d.tp, kTp}, {d.pp, kPp}, {d.ep, kEp}})
    TITAN_CHECK(v >= 1, key, " must be >= 1, got ", v);
  TITAN_CHECK(d.dp_shard == -1 || d.dp_shard >= 1, kShard, " must be -1 (all remaining ranks) or >= 1, got ",
              d.dp_shard);
  ParallelDims p;
  p.dp_replicate = d.dp_replicate, p.cp = d.cp, p.tp = d.tp, p.pp = d.pp, p.ep = d.ep, p.world = world;
  const int64_t others = d.dp_replicate * d.cp * d.tp * d.pp;
  if (d.dp_shard == -1) {
    TITAN_CHECK(world % others == 0, "the ", world, " ranks are not divisible by ", kRep, " x ", kCp, " x ", kTp,
                " x ", kPp, " = ", d.dp_replicate, " x ", d.cp, " x ", d.tp, " x ", d.pp, " = ", others, " (", kShard,
                " = -1 takes the rest)");
    p.dp_shard = world / others;
  } else {
    p.dp_shard = d.dp_shard;
    TITAN_CHECK(others * d.dp_shard == world, kRep, " x ", kShard, " x ", kCp, " x ", kTp, " x ", kPp, " = ",
                d.dp_replicate, " x ", d.dp_shard, " x ", d.cp, " x ", d.tp, " x ", d.pp, " = ", others * d.dp_shard,
                ", not the ", world, " ranks of this run");
  }
  const int64_t ep_pool = p.dp_shard * p.cp * p.tp;
  TITAN_CHECK(ep_pool % p.ep == 0, kEp, " = ", p.ep, " does not divide ", kShard, " x ", kCp, " x ", kTp, " = ",
              p.dp_shard, " x ", p.cp, " x ", p.tp, " = ", ep_pool, " (expert parallelism borrows those ranks)");
  TITAN_CHECK(p.ep == 1 || p.ep % p.tp == 0 || p.tp % p.ep == 0, kEp, " = ", p.ep, " and ", kTp, " = ", p.tp,
              ": one must divide the other");
  divides(p.tp, kTp, m.heads, "attention heads (num_attention_heads)");
  divides(p.tp, kTp, m.kv_heads, "key/value heads (num_key_value_heads)");
  divides(p.tp, kTp, m.ffn, "MLP width (intermediate_size)");
  divides(p.tp, kTp, m.linear_key_heads, "linear-attention key heads (linear_num_key_heads)");
  divides(p.tp, kTp, m.linear_value_heads, "linear-attention value heads (linear_num_value_heads)");
  divides(p.ep, kEp, m.experts, "experts (num_experts)");
  TITAN_CHECK(m.layers <= 0 || p.pp <= m.layers, kPp, " = ", p.pp, " is more than the model's ", m.layers, " layers");
  return p;
}

std::string ParallelDims::describe() const {
  return "dp_replicate=" + std::to_string(dp_replicate) + " dp_shard=" + std::to_string(dp_shard) +
         " cp=" + std::to_string(cp) + " tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) +
         " ep=" + std::to_string(ep) + " (world " + std::to_string(world) + ")";
}

}  // namespace titan::comm
