// The parallel degrees of a job and their rules (torchtitan's ParallelDims): data-parallel
// replicate and shard degrees (shard -1 = every rank the others leave), context, tensor, pipeline
// and expert parallelism. The product of dp_replicate, dp_shard, cp, tp and pp is the world; ep
// borrows ranks from dp_shard x cp x tp (it must divide that product); what each degree splits
// must divide by it. Every refusal is one line naming the [parallelism] keys involved.
//
// Derived groups: fsdp = dp_shard x cp (parameters are sharded over both: CP ranks hold the same
// weights), batch = dp_replicate x dp_shard (ranks that read different data), loss = batch x cp
// (ranks whose tokens one loss averages over).
#pragma once
#include <cstdint>
#include <string>

namespace titan::comm {

// As written in [parallelism]: data_parallel_replicate_degree, data_parallel_shard_degree, ...
struct ParallelDegrees {
  int64_t dp_replicate = 1;
  int64_t dp_shard = -1;
  int64_t cp = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t ep = 1;
};

// The model sizes the degrees must divide; 0 = not known / not checked.
struct ModelDims {
  int64_t heads = 0, kv_heads = 0, ffn = 0, experts = 0, layers = 0;
  int64_t linear_key_heads = 0, linear_value_heads = 0;  // gated delta-net layers (Qwen3.5)
};

struct ParallelDims {
  int64_t dp_replicate = 1, dp_shard = 1, cp = 1, tp = 1, pp = 1, ep = 1;
  int64_t world = 1;

  // Resolves dp_shard = -1 and checks every rule for `world` ranks (and `model` when given).
  static ParallelDims resolve(const ParallelDegrees& d, int64_t world, const ModelDims& model = {});

  int64_t fsdp() const { return dp_shard * cp; }
  int64_t batch() const { return dp_replicate * dp_shard; }  // the data-parallel degree
  int64_t loss() const { return batch() * cp; }
  int64_t expert_fsdp() const { return dp_shard * cp * tp / ep; }  // what shards one expert's weights
  bool dp_sharded() const { return dp_shard > 1; }
  bool hsdp() const { return dp_replicate > 1 && dp_shard > 1; }
  // "dp_replicate=2 dp_shard=2 cp=1 tp=1 pp=1 ep=1 (world 4)"
  std::string describe() const;
};

}  // namespace titan::comm
